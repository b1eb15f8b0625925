"""heap.py: the hot path's heap settings change speed only, never a result, and can be switched off."""
import os
import subprocess
import sys

SCRIPT = """
import hashlib, numpy as np
from autotune.costmodel.heap import tune_heap
from autotune.costmodel.iteration import evaluate_batch
from autotune.space import SearchSpace
from autotune.specs.presets import build_scenario
scen = build_scenario("llama3-405b", "campus-5bldg")
batch = SearchSpace(scen).sample(70000, seed=3)          # three chunks, the last one short
out = evaluate_batch(scen, batch, check=False)
h = hashlib.sha256()
for k in sorted(out):
    h.update(k.encode()); h.update(np.ascontiguousarray(out[k]).tobytes())
print(tune_heap(), h.hexdigest())
"""


def _run(heap: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_HEAP"}
    if heap is not None:
        env["AUTOTUNE_HEAP"] = heap
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.split()


def test_heap_settings_change_no_result_and_can_be_switched_off():
    tuned, default = _run(None), _run("default")
    assert tuned[0] in ("tuned", "unsupported")          # glibc hosts: tuned
    assert default[0] == "default"
    assert tuned[1] == default[1]                         # bit-identical outputs
