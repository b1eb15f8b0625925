"""heap.py: the hot path's heap settings change speed only, never a result; they take on glibc,
stop the page faults they are for, and can be switched off."""
import os
import platform
import subprocess
import sys

from tests.test_hardening import assert_one_line_error

SCRIPT = """
import hashlib, resource, numpy as np
from autotune.costmodel.heap import tune_heap
from autotune.costmodel.iteration import evaluate_batch
from autotune.space import SearchSpace
from autotune.specs.presets import build_scenario
scen = build_scenario("llama3-405b", "campus-5bldg")
batch = SearchSpace(scen).sample(100000, seed=3)         # several chunks, the last one short
out = evaluate_batch(scen, batch, check=False)
h = hashlib.sha256()
for k in sorted(out):
    h.update(k.encode()); h.update(np.ascontiguousarray(out[k]).tobytes())
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    evaluate_batch(scen, batch, check=False)
print(tune_heap(), h.hexdigest(), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) // 3)
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
    assert default[0] == "default"
    assert tuned[0] == ("tuned" if platform.libc_ver()[0] == "glibc" else "unsupported")
    assert tuned[1] == default[1]                         # bit-identical outputs, different chunk sizes
    if tuned[0] == "tuned":
        # what the settings are for: repeated batches stop faulting freed pages back in
        assert int(tuned[2]) * 3 < int(default[2]), (tuned[2], default[2])


def test_bad_heap_switch_is_one_line():
    env = dict(os.environ, AUTOTUNE_HEAP="off")
    res = subprocess.run([sys.executable, "-m", "autotune", "search", "--model", "llama3-8b", "--cluster",
                          "metro-2bldg", "--gpus", "64", "--global-batch", "64"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert_one_line_error(res.returncode, res.stderr, "AUTOTUNE_HEAP", "off", "tuned or default")
