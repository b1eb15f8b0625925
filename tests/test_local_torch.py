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
    tag = f"reaped-{os.getpid()}-{os.urandom(4).hex()}"      # this job's ranks alone: other runs may be on the machine
    job = job_for(s, Config(tp=1, pp=1, dp=2, dp_flavour="ddp"), warmup=1, steps=1) | {"crash_rank": 1, "test_tag": tag}
    out = run_job(job, timeout_s=120)
    assert "rank 1" in out["error"] and "injected failure on rank 1" in out["error"]
    left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout
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


def ours() -> list[str]:
    """Emulated-building namespaces this test process owns (named autotune-<owner pid>-...):
    another run on the machine may hold its own."""
    from autotune.workloads.netns import PREFIX, our_namespaces
    return [ns for ns in our_namespaces() if ns.startswith(f"{PREFIX}-{os.getpid()}-")]


def _namespaces_or_skip():
    from autotune.workloads.netns import NamespaceUnavailable, check_available
    try:
        check_available()
    except NamespaceUnavailable as e:
        pytest.skip(f"emulated buildings unavailable here: {e}")


@pytest.mark.slow      # kept out of the 10-minute default run; CI's slow suite runs it (20 s)
def test_a_shaped_cross_building_link_slows_dp_out_by_about_what_the_model_predicts():
    """Two buildings as network namespaces, DDP across them (DP-out): shaping each building's uplink
    to 50 Mbit/s slows the step, and the slow-down is within a factor of 2.5 of the cost model's
    (same scenario, cross-building bandwidth set to the shaped rate). Nothing is left behind."""
    _namespaces_or_skip()
    from autotune.costmodel import evaluate
    s = small()
    c = Config(tp=1, pp=1, dp=2, dp_flavour="ddp")
    free = LocalTorchBackend(warmup=1, steps=3, timeout_s=120, emulate="true").measure(s, c)
    shaped = LocalTorchBackend(warmup=1, steps=3, timeout_s=120, xb_rate_mbit="50").measure(s, c)
    assert not free.failed and not shaped.failed, (free.reason, shaped.reason)
    measured = shaped.iteration_time_s - free.iteration_time_s
    slow = build_scenario("llama-mini", "local-2bldg", gpus=2,
                          overrides=SMALL + [f"cluster.cross_building.bandwidth_Bps={50e6 / 8}"])
    predicted = evaluate(slow, c).iteration_time_s - evaluate(s, c).iteration_time_s
    print(f"shaped 50 Mbit/s: step +{measured:.3f} s measured, +{predicted:.3f} s predicted")   # -s shows it
    assert measured > 0 and predicted > 0
    assert 1 / 2.5 < measured / predicted < 2.5, (measured, predicted)
    assert not ours()


def test_emulation_is_torn_down_when_a_rank_crashes():
    _namespaces_or_skip()
    from autotune.workloads.netns import EmulatedBuildings
    job = job_for(small(), Config(tp=1, pp=1, dp=2, dp_flavour="ddp"), warmup=1, steps=1) | {"crash_rank": 0}
    with EmulatedBuildings(2, 100) as eb:
        out = run_job(job, timeout_s=120, netns=eb.netns, master_addr=eb.addr[0], ifname=eb.ifname)
    assert "injected failure on rank 0" in out["error"]
    assert not ours()


CALIBRATE = ["calibrate", "--model", "llama-mini", "--cluster", "local-2bldg", "--gpus", "2",
             "--set", "workload.global_batch_seqs=8", "--set", "workload.seq_len=64"]


@pytest.mark.parametrize("args,needle", [(["--xb-mbit", "fast"], "--xb-mbit"), (["--configs", "2"], "--configs"),
                                         (["--holdout", "0.9"], "--holdout"),
                                         (["--backend-option", "colour=red"], "--backend-option")])
def test_calibrate_bad_input_is_one_line(run_cli, args, needle):
    r = run_cli(*CALIBRATE, *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_calibration_on_emulated_buildings_predicts_held_out_configurations(run_cli, tmp_path):
    """14 configurations (DP-out and PP-out, DDP, ZeRO-1 and FSDP, five PP schedules, three
    micro-batch sizes) at 50 and 200 Mbit/s across two emulated buildings, one rank per core; the
    fit on the rest predicts the held-out ones.

    Issue 5 asks for Spearman >= 0.8 and median APE <= 20% on held-out configurations; this test
    asserts both. Measured on the 2-core project machine with the sliced ring collectives, the
    2 s minimum measurement and the in-flight-window pipeline model (README): Spearman 0.952 and
    0.952, median APE 6.5% and 8.4% in two runs."""
    _namespaces_or_skip()
    out = tmp_path / "calibrated.yaml"
    r = run_cli(*CALIBRATE, "--xb-mbit", "50,200", "--configs", "14", "--out", str(out), "--json", timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    rows = d["fit_rows"] + d["holdout_rows"]
    assert {x["config"]["placement"] for x in rows} == {"dp_out", "pp_out"}
    assert len({x["config"]["pp_schedule"] for x in rows if x["config"]["pp"] > 1}) >= 3
    assert len({x["config"]["dp_flavour"] for x in rows if x["config"]["dp"] > 1}) >= 2
    print(json.dumps({k: d[k] for k in ("params", "spearman_holdout", "mape_holdout_pct", "mape_fit_pct",
                                        "failed_rows")}))
    assert len(d["failed_rows"]) <= 1, d["failed_rows"]      # one of 28 runs failed once, reason not kept
    assert d["spearman_holdout"] >= 0.8 and d["mape_holdout_pct"] <= 20.0
    ev = run_cli("evaluate", "--scenario", str(out), "--config",
                 "tp=1,pp=2,dp=1,dp_flavour=ddp,placement=pp_out,pp_schedule=1f1b",
                 "--json")
    assert ev.returncode == 0, ev.stderr


def _ring_worker(rank, world, port, q):
    import torch
    import torch.distributed as dist
    from autotune.workloads.dp import SLICE_BYTES, ring_all_gather, ring_reduce_scatter
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    n = 2 * SLICE_BYTES // 4 + 7                      # a chunk of three slices, the last one short
    x = torch.randn(world * n, generator=torch.Generator().manual_seed(rank))
    mine, ref = torch.empty(n), torch.empty(n)
    ring_reduce_scatter(mine, x.clone(), dist.group.WORLD)
    dist.reduce_scatter_tensor(ref, x.clone())
    gathered, gathered_ref = torch.empty(world * n), torch.empty(world * n)
    ring_all_gather(gathered, mine, dist.group.WORLD)
    dist.all_gather_single(gathered_ref, mine)
    q.put(max(float((mine - ref).abs().max()), float((gathered - gathered_ref).abs().max())))
    dist.destroy_process_group()


def test_ring_collectives_equal_gloos():
    """The workload's sliced ring reduce-scatter and all-gather (NCCL's byte count and slicing;
    gloo's reduce-scatter moves all-reduce bytes) give the same results as gloo's, on 3 ranks."""
    import torch.multiprocessing as mp
    from autotune.workloads.launch import _free_port
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_ring_worker, args=(r, 3, port, q)) for r in range(3)]
    for p in procs:
        p.start()
    diffs = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert max(diffs) < 1e-5 and all(p.exitcode == 0 for p in procs)


@pytest.mark.slow
def test_measured_cross_building_bytes_match_the_model():
    """Bytes leaving each emulated building per step (its veth's tx counter, read by the workload)
    against the model's xb_bytes_per_step with the workload's semantics (fp32, FSDP2's pipelined
    regather): ZeRO-1, FSDP and DDP across buildings under a pipeline, and DDP's own reducer
    (overlapped, no pipeline), within 5%."""
    _namespaces_or_skip()
    from autotune.costmodel import evaluate
    s = build_scenario("llama-mini", "local-2bldg", gpus=4,
                       overrides=SMALL + [f"workload.{k}={v}" for k, v in LocalTorchBackend.workload_semantics.items()])
    b = LocalTorchBackend(warmup=1, steps=2, timeout_s=120, emulate="true")
    for c in (Config(tp=1, pp=2, dp=2, dp_flavour="zero1", pp_schedule="1f1b", micro_batch=2, overlap_dp=0),
              Config(tp=1, pp=2, dp=2, dp_flavour="fsdp", pp_schedule="1f1b", micro_batch=1, overlap_dp=0),
              Config(tp=1, pp=2, dp=2, dp_flavour="ddp", pp_schedule="interleaved_1f1b", pp_chunks=2, micro_batch=2,
                     overlap_dp=0),
              Config(tp=1, pp=1, dp=4, dp_flavour="ddp", micro_batch=2, overlap_dp=1)):
        m = b.measure(s, c)
        assert not m.failed, m.reason
        measured, model = m.extra["xb_bytes_per_step"], evaluate(s, c).traffic["xb_bytes_per_step"]
        print(f"{c.dp_flavour}: {measured / 1e6:.2f} MB measured, {model / 1e6:.2f} MB modelled")
        assert measured == pytest.approx(model, rel=0.05)
