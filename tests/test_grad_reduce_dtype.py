"""The data-parallel collectives' dtypes (WorkloadSpec.grad_reduce_dtype): gradients reduced in
fp32 where the framework reduces its fp32 buffer (Megatron under bf16, nanotron, torchtitan's
FSDP2), parameters gathered at the working weights' bytes (1 B with fp8_param_gather)."""
from __future__ import annotations

import pytest

import autotune.validation as V
from autotune.configbatch import scalar_row
from autotune.costmodel.iteration import iteration_formulas
from autotune.costmodel.params import default_params
from autotune.costmodel.xp import SCALAR
from autotune.specs import Config, build_scenario

from test_runs_schema import _write


def _scen(*overrides):
    return build_scenario("llama3-8b", "metro-2bldg", overrides=list(overrides))


@pytest.mark.parametrize("overrides, dtype", [
    ((), "fp32"),                                                          # Megatron under bf16
    (("workload.grad_dtype=bf16",), "bf16"),                               # --grad-reduce-in-bf16
    (("workload.precision=fp16",), "bf16"),                                # Megatron's fp32 rule is bf16's
    (("workload.precision=fp8",), "fp32"),
    (("workload.framework=nanotron",), "fp32"), (("workload.framework=pytorch",), "bf16"),
    (("workload.framework=deepspeed",), "bf16"), (("workload.framework=jax",), "bf16"),
    (("workload.framework=pytorch", "workload.grad_reduce_dtype=fp32"), "fp32"),     # torchtitan's FSDP2
    (("workload.framework=deepspeed", "workload.grad_reduce_dtype=fp32"), "fp32"),
    (("workload.precision=fp32",), "fp32")])
def test_each_framework_class_reduces_in_its_own_dtype(overrides, dtype):
    assert _scen(*overrides).workload.resolved_grad_reduce_dtype == dtype


@pytest.mark.parametrize("overrides, dtype", [
    ((), "bf16"),                                  # Megatron's FSDP paths reduce the bf16 parameters' gradients
    (("workload.grad_reduce_dtype=fp32",), "fp32"), (("workload.framework=pytorch",), "bf16"),
    (("workload.framework=nanotron",), "fp32"), (("workload.precision=fp32",), "fp32")])
def test_sharded_flavours_reduce_in_their_own_dtype(overrides, dtype):
    assert _scen(*overrides).workload.resolved_fsdp_grad_reduce_dtype == dtype


def test_megatron_fsdp_moves_bf16_gradients_while_its_zero1_moves_fp32():
    z1 = Config(tp=8, pp=1, dp=16, dp_flavour="zero1", micro_batch=1, placement="dp_out")
    fsdp = z1.model_copy(update={"dp_flavour": "fsdp"})
    assert _xb_dp(z1) / _xb_dp(z1, "workload.grad_reduce_dtype=bf16") == pytest.approx(1.5, rel=1e-9)
    assert _xb_dp(fsdp) == _xb_dp(fsdp, "workload.grad_reduce_dtype=bf16")
    assert _xb_dp(fsdp, "workload.grad_reduce_dtype=fp32") > _xb_dp(fsdp)


def test_bf16_reduction_under_fp32_training_is_refused():
    with pytest.raises(ValueError, match="grad_reduce_dtype bf16 needs mixed precision"):
        _scen("workload.precision=fp32", "workload.grad_reduce_dtype=bf16")


def _out(cfg: Config, *overrides) -> dict:
    return iteration_formulas(_scen(*overrides), scalar_row(cfg), default_params(), SCALAR)


def _xb_dp(cfg: Config, *overrides) -> float:
    """Cross-building data-parallel bytes per GPU and step of one configuration."""
    return float(_out(cfg, *overrides)["xb_dp_bytes_per_gpu"])


@pytest.mark.parametrize("flavour, ratio", [
    ("ddp", 2.0),                  # an all-reduce of gradients only: 4 B against 2 B
    ("zero1", 1.5),                # a reduce-scatter at 4 B and an all-gather at 2 B, against 2 + 2
])
def test_fp32_reduction_moves_twice_the_gradient_bytes_across(flavour, ratio):
    cfg = Config(tp=8, pp=1, dp=16, dp_flavour=flavour, micro_batch=1, placement="dp_out")
    fp32, bf16 = _xb_dp(cfg), _xb_dp(cfg, "workload.grad_reduce_dtype=bf16")
    assert bf16 > 0 and fp32 / bf16 == pytest.approx(ratio, rel=1e-9)


@pytest.mark.parametrize("flavour, regather, ratio", [
    ("fsdp", "every_pass", (2 * 2.0 + 4.0) / (2 * 2.0 + 2.0)),   # per micro-batch two gathers and one reduce-scatter
    ("fsdp", "never", (2.0 + 4.0) / (2.0 + 2.0)),                # one of each per step
    ("hsdp", "every_pass", 2.0),                                 # only the shard's all-reduce crosses: gradients
])
def test_sharded_flavours_count_gathers_and_reductions_apart(flavour, regather, ratio):
    cfg = Config(tp=8, pp=1, dp=16, dp_flavour=flavour, micro_batch=1, placement="dp_out")
    at = (f"workload.fsdp_regather={regather}",)
    fp32, bf16 = _xb_dp(cfg, *at, "workload.grad_reduce_dtype=fp32"), _xb_dp(cfg, *at, "workload.grad_reduce_dtype=bf16")
    assert bf16 > 0 and fp32 / bf16 == pytest.approx(ratio, rel=1e-9)


def test_batches_and_tiers_agree_with_the_closed_form():
    """evaluate_batch (sorted, chunked, gathers priced on their own rows) gives each row what the
    scalar formulas give, and the per-tier table's cross-building DP bytes are the model's own."""
    import numpy as np
    from autotune.costmodel.iteration import evaluate_batch
    from autotune.space import SearchSpace
    scen = _scen("workload.framework=nanotron")
    batch = SearchSpace(scen).sample(3000, seed=3)
    out = evaluate_batch(scen, batch, tiers=True, check=False)
    from autotune.space import config_at
    for i in range(0, 3000, 397):
        one = iteration_formulas(scen, scalar_row(config_at(batch, i)), default_params(), SCALAR)
        assert out["iteration_time_s"][i] == pytest.approx(float(one["iteration_time_s"]), rel=1e-12)
        assert out["xb_dp_bytes_per_gpu"][i] == pytest.approx(float(one["xb_dp_bytes_per_gpu"]), rel=1e-12)
    tier = out["tier_dp_cross_building_bytes_per_gpu"] + out["tier_dp_cross_region_bytes_per_gpu"]
    assert np.allclose(tier, out["xb_dp_bytes_per_gpu"], rtol=1e-12)


def test_fp8_weights_halve_the_gathers_not_the_reductions():
    cfg = Config(tp=8, pp=1, dp=16, dp_flavour="zero1", micro_batch=1, placement="dp_out")
    fp8 = ("workload.precision=fp8", "workload.grad_reduce_dtype=bf16")
    bf16w, fp8w = _xb_dp(cfg, *fp8), _xb_dp(cfg, *fp8, "workload.fp8_param_gather=true")
    assert fp8w / bf16w == pytest.approx((2.0 + 1.0) / (2.0 + 2.0), rel=1e-9)
    ddp = cfg.model_copy(update={"dp_flavour": "ddp"})
    assert _xb_dp(ddp, *fp8) == _xb_dp(ddp, *fp8, "workload.fp8_param_gather=true")


def test_more_bytes_take_longer():
    for flavour in ("ddp", "zero1"):          # step-end collectives (FSDP's run with the micro-batches)
        cfg = Config(tp=8, pp=1, dp=16, dp_flavour=flavour, micro_batch=1, placement="dp_out")
        fp32, bf16 = _out(cfg)["dp_link_s"], _out(cfg, "workload.grad_reduce_dtype=bf16")["dp_link_s"]
        assert fp32 > bf16 > 0


@pytest.mark.parametrize("text, dtype", [
    ("PURE", "bf16"), ("mixed_precision: PURE", "bf16"), ("bfSixteen", "bf16"),
    ("reduce_dtype=torch.bfloat16", "bf16"), ("reduce_dtype: float32", "fp32"), ("DEFAULT", "fp32"),
    ("fp16", "bf16"), ("FP32", "fp32"), ("--grad-reduce-in-bf16", "bf16"),
    ("fp32 buffer, bf16 on the wire", None), ("int8", None), ("bf16 (default)", "bf16"),
    ("PURE (reduce fp32)", None), ("DEFAULT (bf16)", None), ("mixed_precision: DEFAULT", "fp32")])
def test_reduce_dtype_spellings(text, dtype):
    from autotune.validation.columns import map_grad_reduce_dtype
    assert map_grad_reduce_dtype(text) == dtype


def test_runs_column_states_it_or_the_row_names_the_class_default(tmp_path):
    p = _write(tmp_path, [{"grad_reduce_dtype": "PURE"}, {}, {"grad_reduce_dtype": "int8"}])
    cases, skipped = V.read_runs(p)
    assert cases[0].scenario.workload.grad_reduce_dtype == "bf16"
    assert cases[1].scenario.workload.grad_reduce_dtype is None
    assert "grad_reduce_dtype=fp32 (not stated; the megatron class's own)" in cases[1].assumptions
    assert [(s.get("column"), s.get("value")) for s in skipped] == [("grad_reduce_dtype", "int8")]


def test_a_stated_reduction_dtype_changes_the_scenario_key():
    """The default (None) is left out of the key (test_post_validation holds the keys); a stated
    dtype, even the one the default resolves to, is a different scenario."""
    assert _scen("workload.grad_reduce_dtype=fp32").key != _scen().key


def test_buckets_hold_the_reduced_gradients():
    """Megatron and DeepSpeed size buckets in elements (the same count whatever the dtype), torch
    DDP in bytes (25 MiB: fp32 gradients fill twice the buckets of bf16 ones)."""
    from autotune.costmodel import constants as C
    from autotune.costmodel.scenario_consts import framework_bucket
    assert framework_bucket("megatron", 4.0)["bucket_min_bytes"] == 2 * framework_bucket("megatron", 2.0)["bucket_min_bytes"]
    assert framework_bucket("pytorch", 4.0) == framework_bucket("pytorch", 2.0)
    assert framework_bucket("nanotron", 4.0)["bucket_min_bytes"] == C.TORCH_DDP_BUCKET_BYTES
