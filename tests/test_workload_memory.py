"""The memory model against the reference workload's measured peaks (``autotune memory``): the
eager activation count against what autograd really saves, live measurements of two
configurations, the shipped grid through the CLI, and bad input."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import memcheck
from autotune.costmodel import constants as C
from autotune.workloads.memprobe import WINDOW, peak_in_window

CLI = [sys.executable, "-m", "autotune"]


def _saved_activation_elems_per_token(block, x) -> float:
    """Elements of the non-parameter tensors autograd saves for the block's backward, per token
    (each storage once: views of one tensor count once)."""
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes() // t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x)
    return sum(seen.values()) / (x.shape[0] * x.shape[1])


@pytest.mark.parametrize("h,heads,ffn", [(128, 4, 344), (256, 8, 512), (96, 3, 256)])
def test_eager_activation_count_is_what_autograd_saves(h, heads, ffn):
    """constants.ACT_EAGER_*: two RMSNorms of 3h, q, k, v and the attention output, 4 elements
    per FFN width for SwiGLU; autograd also saves the per-row rsqrt (2) and the attention's
    log-sum-exp (heads), which the model leaves out (< 0.5%)."""
    from autotune.workloads.train import Block
    torch.manual_seed(0)
    saved = _saved_activation_elems_per_token(Block(h, heads, ffn), torch.randn(2, 64, h, requires_grad=True))
    model = 2 * C.ACT_EAGER_NORM_ELEMS_PER_TOKEN_HIDDEN * h + 2 * h + 2 * h \
        + C.ACT_EAGER_GATED_MLP_ELEMS_PER_TOKEN_FFN * ffn
    assert saved == pytest.approx(model + 2 + heads, rel=1e-9)


def test_peak_in_window_reads_the_running_total_inside_the_range():
    ev = [{"name": "[memory]", "ts": 1.0, "args": {"Total Allocated": 100}},
          {"name": WINDOW, "ph": "X", "ts": 2.0, "dur": 10.0},
          {"name": "[memory]", "ts": 3.0, "args": {"Total Allocated": 500}},
          {"name": "[memory]", "ts": 5.0, "args": {"Total Allocated": 300}},
          {"name": "[memory]", "ts": 20.0, "args": {"Total Allocated": 900}}]
    assert peak_in_window(ev) == {"peak_bytes": 500.0, "between_steps_bytes": 100.0}
    with pytest.raises(ValueError, match="no measured-steps range"):
        peak_in_window(ev[:1])


@pytest.mark.parametrize("i", [7, 14], ids=["zero1-pp1-mb2-seq256", "fsdp-pp2-1f1b"])
def test_live_peak_within_ten_percent(i):
    """Measured now, on this machine: the model's prediction within 10% of the largest rank's peak."""
    row = memcheck.grid()[i]
    got = memcheck.compare(memcheck.measure([row], timeout_s=120))["rows"][0]
    assert abs(got["err_pct"]) <= memcheck.TARGET_PCT, got


def test_shipped_grid_through_the_cli():
    r = subprocess.run([*CLI, "memory", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["by_flavour"]) == {"ddp", "zero1", "fsdp", "hsdp"}
    for fl, st_ in d["by_flavour"].items():
        assert st_["median_abs_err_pct"] <= memcheck.TARGET_PCT, (fl, st_)
    within = [row for row in d["rows"] if row["schedule"] in memcheck.PAPER_SCHEDULES]
    assert sum(abs(row["err_pct"]) <= memcheck.TARGET_PCT for row in within) >= len(within) - 1
    human = subprocess.run([*CLI, "memory"], capture_output=True, text=True, timeout=120)
    assert human.returncode == 0 and "zero1" in human.stdout and "measured" in human.stdout


@pytest.mark.parametrize("args,field", [(["--write", "x.csv"], "--write"),
                                         (["--data", "/nonexistent/m.csv"], "--data"),
                                         (["--measure", "--data", "a.csv"], "--data")])
def test_bad_input_is_one_line(args, field, tmp_path):
    r = subprocess.run([*CLI, "memory", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert field in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


GOOD = {"dp": "2", "pp": "1", "dp_flavour": "zero1", "pp_schedule": "1f1b", "pp_chunks": "1", "micro_batch": "2",
        "seq_len": "128", "global_batch": "32", "placement": "dp_out", "measured_peak_bytes": "5.4e7",
        "measured_between_steps_bytes": "2.5e7", "torch": "2.13.0", "machine": "x86_64 Linux"}


@pytest.mark.parametrize("change", [{"dp": "x"}, {"dp_flavour": ""}, {"dp_flavour": "zero9"}, {"pp_chunks": "0"},
                                    {"measured_peak_bytes": "0"}, {"measured_peak_bytes": "nan"},
                                    {"global_batch": "31"}, {"placement": "sideways"}],
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_malformed_measurements_are_one_line(change, tmp_path):
    bad = tmp_path / "m.csv"
    row = {**GOOD, **change}
    bad.write_text(",".join(row) + "\n" + ",".join(row.values()) + "\n")
    r = subprocess.run([*CLI, "memory", "--data", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "line 2" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    k, v = next(iter(change.items()))
    if v and k in ("dp", "dp_flavour", "placement"):          # the column and the value, named
        assert f"{k}" in r.stderr and v in r.stderr, r.stderr


def test_measurements_file_without_a_paper_schedule_row_still_reports(tmp_path):
    """A file of multi-chunk schedules only: no flavour summary, no crash."""
    ok = tmp_path / "m.csv"
    row = {**GOOD, "dp": "1", "pp": "4", "dp_flavour": "ddp", "pp_schedule": "zbv", "placement": "pp_out"}
    ok.write_text(",".join(row) + "\n" + ",".join(row.values()) + "\n")
    r = subprocess.run([*CLI, "memory", "--data", str(ok)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "zbv" in r.stdout, r.stderr


def test_non_utf8_measurements_are_one_line(tmp_path):
    bad = tmp_path / "m.csv"
    bad.write_bytes(b"dp,pp\n\xff\xfe,1\n")
    r = subprocess.run([*CLI, "memory", "--data", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "UTF-8" in r.stderr and "Traceback" not in r.stderr


@settings(max_examples=25, deadline=None)
@given(mb=st.sampled_from([1, 2, 4]), fl=st.sampled_from(["ddp", "zero1", "fsdp"]),
       sched=st.sampled_from(["gpipe", "1f1b", "interleaved_1f1b", "zbv"]))
def test_memory_grows_with_the_micro_batch(mb, fl, sched):
    """Property: under either activation recipe, a larger micro-batch never needs less memory."""
    row = {"dp": 2, "pp": 2, "dp_flavour": fl, "pp_schedule": sched, "pp_chunks": 2 if sched == "interleaved_1f1b" else 1,
           "micro_batch": mb, "seq_len": 128, "global_batch": 32, "placement": "pp_out"}
    assert memcheck.predicted_bytes({**row, "micro_batch": 2 * mb}) > memcheck.predicted_bytes(row)


def test_v_schedules_hold_embedding_and_head_on_the_first_rank():
    """ZBV and DualPipeV run the first and the last stage on rank 0: both vocab x h matrices."""
    from autotune.costmodel.iteration import _scalar_row, iteration_formulas
    from autotune.costmodel.params import default_params
    from autotune.costmodel.xp import SCALAR
    from autotune.specs import build_scenario
    from autotune.specs.config import Config
    sc = build_scenario("llama3-8b", "single-building")
    k = sc.model.vocab * sc.model.hidden

    def params(sched):
        cfg = Config(tp=1, pp=4, dp=sc.n_gpus // 4, pp_schedule=sched, dp_flavour="ddp", micro_batch=1)
        out = iteration_formulas(sc, _scalar_row(cfg), default_params(), SCALAR)
        return float(out["_acct"]["P_dense"])
    one, v = params("1f1b"), params("zbv")
    assert v - one == pytest.approx(k, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(k=st.integers(1, 7), recipe=st.sampled_from(["fused", "eager"]))
def test_each_routed_copy_keeps_its_expert_input_and_output(k, recipe):
    """Property: one more routed expert per token adds at least the copy's expert input and
    output (2 x h activation elements per token and MoE layer, times the imbalance factor) to
    the memory of a configuration without recomputation, whatever the recipe."""
    from autotune.costmodel.iteration import _scalar_row, iteration_formulas
    from autotune.costmodel.params import default_params
    from autotune.costmodel.xp import SCALAR
    from autotune.specs import build_scenario
    from autotune.specs.config import Config

    def mem(top_k):
        sc = build_scenario("mixtral-8x7b", "single-building",
                            overrides=[f"model.moe_top_k={top_k}", f"workload.activation_memory={recipe}"])
        cfg = Config(tp=2, pp=1, ep=8, dp=sc.n_gpus // 2, dp_flavour="zero1", micro_batch=1, recompute="none")
        return float(iteration_formulas(sc, _scalar_row(cfg), default_params(), SCALAR)["memory_per_gpu_bytes"]), sc
    m0, sc = mem(k)
    m1, _ = mem(k + 1)
    m = sc.model
    copies = default_params().dropless_expert_imbalance * C.ACT_MOE_ROUTED_COPY_ELEMS_PER_TOKEN_HIDDEN * m.hidden * C.ACTIVATION_BYTES \
        * sc.seq_len * m.n_moe_layers / 2
    assert m1 - m0 >= copies * (1 - 1e-9)
