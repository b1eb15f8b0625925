"""Run by a Python that has torchtitan installed (tests/test_torchtitan_parser.py builds one): parse
each case's options with torchtitan's own ConfigManager and report what it understood.

stdin: JSON list of {"module", "config", "args", "n_layers"}; stdout: JSON list of
{"ok": true, "parallelism": {...}, "training": {...}, "ac": "FullAC", "virtual_stages": N} or
{"ok": false, "error": "..."}."""
import contextlib
import dataclasses
import io
import json
import sys
from types import SimpleNamespace
from unittest import mock

# torchtitan's MoE kernels import triton at module level; the CPU build of torch has none, and the
# parser never runs a kernel
sys.modules["torchtitan.distributed.minimal_async_ep.kernels"] = mock.MagicMock()

from torchtitan.config import ConfigManager  # noqa: E402
from torchtitan.distributed.pipeline_parallel import _get_pipeline_metadata  # noqa: E402

out = []
for case in json.load(sys.stdin):
    argv = ["--module", case["module"], "--config", case["config"], *case["args"]]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cfg = ConfigManager().parse_args(argv)
        p = cfg.parallelism
        stages = _get_pipeline_metadata(SimpleNamespace(pp=p.pipeline_parallel_degree), p,
                                        SimpleNamespace(layers=[None] * case["n_layers"]))[0]
        out.append({"ok": True, "parallelism": dataclasses.asdict(p), "training": dataclasses.asdict(cfg.training),
                    "ac": type(cfg.activation_checkpoint).__qualname__, "virtual_stages": stages})
    except BaseException as e:  # noqa: BLE001 - tyro exits on a parse error; report it
        out.append({"ok": False, "error": f"{type(e).__name__}: {e} {err.getvalue()[-600:]}"})
print(json.dumps(out))
