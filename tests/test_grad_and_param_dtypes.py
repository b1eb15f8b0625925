"""A bf16 gradient buffer (WorkloadSpec.grad_dtype; Megatron's --grad-reduce-in-bf16, NeMo's
performance recipes) and fp8 working weights (WorkloadSpec.fp8_param_gather; Megatron-Core's
--fp8-param-gather): 2 B and 1 B a parameter fewer, and less Adam-step traffic."""
from __future__ import annotations

import pytest

import autotune.validation as V
from autotune.costmodel import constants as C
from autotune.costmodel import evaluate
from autotune.costmodel.scenario_consts import adam_traffic_bytes, precision_bytes
from autotune.specs import Config, build_scenario

from test_runs_schema import _write


def _scen(*overrides, gpus=64):
    return build_scenario("llama3-70b", "single-building", gpus=gpus, overrides=list(overrides))


def test_state_bytes():
    assert precision_bytes("bf16") == (2.0, 2.0, 4.0, 12.0)
    assert precision_bytes("bf16", grad_dtype="bf16") == (2.0, 2.0, 2.0, 12.0)
    assert precision_bytes("fp8", fp8_params=True) == (2.0, 1.0, 4.0, 12.0)
    assert precision_bytes("bf16", fp8_params=True)[1] == 2.0          # fp8 weights need fp8 training
    w = _scen("workload.precision=fp8", "workload.grad_dtype=bf16", "workload.fp8_param_gather=true").workload
    # the weight copy is written at 1 B; the bf16 gradient is cast to fp32 before the step: no saving
    assert adam_traffic_bytes(w, precision_bytes("fp8", "fp32", "bf16", True)) \
        == C.ADAM_STEP_TRAFFIC_BYTES_PER_PARAM - 1.0
    assert adam_traffic_bytes(w, precision_bytes("fp8", "fp32", "bf16", False)) \
        == C.ADAM_STEP_TRAFFIC_BYTES_PER_PARAM


def test_memory_falls_by_the_bytes_per_parameter():
    cfg = Config(tp=8, pp=8, dp=1, dp_flavour="ddp", micro_batch=1)      # every parameter on the rank
    params = 70.6e9 / 64
    base = evaluate(_scen("workload.precision=fp8"), cfg, check=False)
    bf16g = evaluate(_scen("workload.precision=fp8", "workload.grad_dtype=bf16"), cfg, check=False)
    fp8w = evaluate(_scen("workload.precision=fp8", "workload.fp8_param_gather=true"), cfg, check=False)
    # the bottleneck rank holds a little more than the average share (the head or the embedding)
    assert 0.97 * 2.0 * params <= base.memory_per_gpu_bytes - bf16g.memory_per_gpu_bytes <= 1.15 * 2.0 * params
    assert 0.97 * 1.0 * params <= base.memory_per_gpu_bytes - fp8w.memory_per_gpu_bytes <= 1.15 * 1.0 * params
    assert bf16g.breakdown["optimizer_s"] == base.breakdown["optimizer_s"]
    assert fp8w.breakdown["optimizer_s"] < base.breakdown["optimizer_s"]


def test_defaults_keep_the_key_and_bad_combinations_are_refused():
    assert _scen("workload.grad_dtype=fp32").key == _scen().key
    assert _scen("workload.grad_dtype=bf16").key != _scen().key
    with pytest.raises(ValueError, match="fp8_param_gather needs precision fp8"):
        _scen("workload.fp8_param_gather=true")
    with pytest.raises(ValueError, match="grad_dtype bf16 needs mixed precision"):
        _scen("workload.precision=fp32", "workload.grad_dtype=bf16")
    with pytest.raises(ValueError):
        _scen("workload.grad_dtype=fp16")


def test_runs_columns_read_the_frameworks_spellings(tmp_path):
    fp8 = {"precision": "fp8", "gpu_type": "H100 SXM"}
    p = _write(tmp_path, [{"grad_dtype": "--grad-reduce-in-bf16"}, {"grad_dtype": "grad_reduce_in_fp32=False"},
                          {"grad_dtype": "grad_reduce_in_fp32: True"}, {"grad_dtype": "FP32 main grads"}, {},
                          {"grad_dtype": "int8"},
                          {**fp8, "fp8_param_gather": "--fp8-param-gather"}, {**fp8, "fp8_param_gather": "no"},
                          {**fp8}, {**fp8, "fp8_param_gather": "sometimes"},
                          {"fp8_param_gather": "yes"}])
    cases, skipped = V.read_runs(p)
    w = [c.scenario.workload for c in cases]
    assert [x.grad_dtype for x in w[:5]] == ["bf16", "bf16", "fp32", "fp32", "fp32"]
    assert [x.fp8_param_gather for x in w[5:]] == [True, False, False]
    assert any("fp8_param_gather=no (not stated)" in a for a in cases[7].assumptions)
    assert len(skipped) == 3
    assert {(s.get("column"), s.get("value")) for s in skipped[:2]} == {("grad_dtype", "int8"),
                                                                       ("fp8_param_gather", "sometimes")}
    # a bf16 row with fp8 weights is an impossible workload: skipped with the spec's reason, no traceback
    assert any("fp8_param_gather needs precision fp8" in s.get("reason", "") for s in skipped)


@pytest.mark.parametrize("text, dtype", [
    ("BF16", "bf16"), (" grad_reduce_in_fp32 = False ", "bf16"), ("grad_reduce_in_fp32=0", "bf16"),
    ("grad_reduce_in_fp32: true (bf16 params)", "fp32"), ("--no-grad-reduce-in-bf16", "fp32"),
    ("--accumulate-allreduce-grads-in-fp32", "fp32"), ("float32", "fp32"),
    ("fp32 accumulation, bf16 reduce", None), ("bf16 params, fp32 grads", None), ("fp32 (not bf16)", None),
    ("int8", None)])
def test_grad_dtype_spellings_flags_first_and_both_dtypes_ambiguous(text, dtype):
    from autotune.validation.columns import map_grad_dtype
    assert map_grad_dtype(text) == dtype


def test_flag_cells_as_key_value_negated_or_not_stated(tmp_path):
    fp8 = {"precision": "fp8", "gpu_type": "H100 SXM"}
    cells = ["fp8_param_gather=False", "fp8_param_gather = True", "--no-fp8-param-gather", "TRUE", "enabled",
             "n/a", "-"]
    cases, skipped = V.read_runs(_write(tmp_path, [{**fp8, "fp8_param_gather": c} for c in cells]))
    assert not skipped
    assert [c.scenario.workload.fp8_param_gather for c in cases] == [False, True, False, True, True, False, False]
