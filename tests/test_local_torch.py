"""The local-torch backend trains the reference workload for real (gloo, CPU processes)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autotune.backends.local_torch import LocalTorchBackend, job_for
from autotune.errors import UserInputError
from autotune.specs import Config, build_scenario
from autotune.workloads.launch import check_job, run_job

SMALL = ["workload.global_batch_seqs=8", "workload.seq_len=64"]


def small(gpus=2):
    return build_scenario("llama-mini", "local-2bldg", gpus=gpus, overrides=SMALL)


def test_real_runs_ddp_and_pipeline():
    s = small()
    b = LocalTorchBackend(warmup=1, steps=2, timeout_s=120)
    ddp = b.measure(s, Config(tp=1, pp=1, dp=2, dp_flavour="ddp"))
    pipe = b.measure(s, Config(tp=1, pp=2, dp=1, placement="pp_out", pp_schedule="1f1b", micro_batch=2))
    for m in (ddp, pipe):
        assert not m.failed, m.reason
        assert 0 < m.iteration_time_s < 60 and len(m.extra["step_times_s"]) == 2


def test_unrunnable_configuration_is_refused_before_any_process_starts():
    s = small()
    job = job_for(s, Config(tp=1, pp=2, dp=1, placement="pp_out", pp_schedule="interleaved_1f1b", pp_chunks=3,
                            micro_batch=2))
    with pytest.raises(UserInputError, match="layers"):
        check_job(job)
    m = LocalTorchBackend().measure(s, Config(tp=2, pp=1, dp=1))
    assert m.failed and "tp" in m.reason


def test_a_crashing_rank_fails_the_job_with_its_own_message_and_everything_is_reaped():
    s = small()
    job = job_for(s, Config(tp=1, pp=1, dp=2, dp_flavour="ddp"), warmup=1, steps=1) | {"crash_rank": 1}
    out = run_job(job, timeout_s=120)
    assert "rank 1" in out["error"] and "injected failure on rank 1" in out["error"]
    left = subprocess.run(["pgrep", "-f", "autotune.workloads.train"], capture_output=True, text=True).stdout
    assert not left.strip()


def test_study_through_the_cli_with_the_local_torch_backend(tmp_path):
    r = subprocess.run([sys.executable, "-m", "autotune.cli", "study", "--model", "llama-mini", "--cluster",
                        "local-2bldg", "--gpus", "2", "--set", SMALL[0], "--set", SMALL[1], "--strategy", "random",
                        "--trials", "3", "--backend", "local-torch", "--backend-option", "steps=1",
                        "--backend-option", "warmup=1", "--trial-timeout", "120", "--storage",
                        f"sqlite:///{tmp_path}/s.db", "--no-tracking", "--json"],
                       capture_output=True, text=True, timeout=900, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["n_trials"] == 3
    assert d["best_iteration_time_s"] is None or d["best_iteration_time_s"] > 0
