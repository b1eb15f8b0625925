"""Transport knobs the search tunes: bad values are one-line errors through the CLI, and the
best configuration comes with the NCCL variables that run it."""
import json

import pytest

BASE = "tp=8,cp=2,pp=2,dp=256,placement=dp_out,dp_flavour=zero1,pp_schedule=1f1b,recompute=selective"
SCEN = ["--model", "llama3-8b", "--cluster", "metro-2bldg"]


@pytest.mark.parametrize("extra,field", [
    ("nccl_channels=65", "nccl_channels"),
    ("nccl_protocol=ll256", "nccl_protocol"),
    ("dp_bucket_mib=900000", "dp_bucket_mib"),
    ("nccl_buffer_mib=0", "nccl_buffer_mib"),
    ("collective=halving_doubling", "collective"),
])
def test_bad_transport_knob_is_one_line_exit_2(run_cli, extra, field):
    r = run_cli("evaluate", *SCEN, "--config", f"{BASE},{extra}")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"config.{field}" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_ll128_refused_where_nccl_cannot_run_it(run_cli):
    r = run_cli("evaluate", "--model", "llama-mini", "--cluster", "local-2bldg", "--gpus", "2",
                "--set", "workload.global_batch_seqs=8", "--config", "tp=1,pp=1,dp=2,nccl_protocol=ll128")
    assert r.returncode == 2 and "config.nccl_protocol" in r.stderr and "LL128" in r.stderr


def test_evaluate_prints_the_nccl_environment(run_cli):
    r = run_cli("evaluate", *SCEN, "--config", f"{BASE},nccl_protocol=ll128,nccl_channels=16,xb_queue_pairs=8",
                "--json")
    assert r.returncode == 0, r.stderr
    env = json.loads(r.stdout)["launch"]["nccl_env"]
    assert env["NCCL_PROTO"] == "LL128" and env["NCCL_MAX_NCHANNELS"] == "16"
    assert env["NCCL_IB_QPS_PER_CONNECTION"] == "8" and env["NCCL_BUFFSIZE"] == str(4 * 2**20)
