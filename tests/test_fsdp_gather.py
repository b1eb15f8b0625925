"""FSDP / ZeRO-3 collective granularity (WorkloadSpec.fsdp_gather): per FSDP unit, per module
(DeepSpeed >= v0.6) or per parameter tensor with world-size list copies (DeepSpeed <= v0.5)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import autotune.validation as V
from autotune.configbatch import scalar_row
from autotune.costmodel import constants as C
from autotune.costmodel.iteration import iteration_formulas
from autotune.costmodel.params import default_params
from autotune.costmodel.scenario_consts import fsdp_gather_counts
from autotune.costmodel.xp import SCALAR
from autotune.specs import Config, build_scenario

from test_runs_schema import _write


def _scen(gather="unit", model="gpt3-175b", *overrides):
    return build_scenario(model, "single-building", overrides=[f"workload.fsdp_gather={gather}", "workload.framework=deepspeed",
                                                           *overrides])


def _dp_s(gather, dp=64, model="gpt3-175b", overlap=0, *overrides):
    cfg = Config(tp=1, pp=1, dp=dp, dp_flavour="fsdp", micro_batch=1, placement="dp_out", overlap_dp=overlap,
                 recompute="full")
    scen = _scen(gather, model, f"cluster.buildings.0.gpus={dp}", f"cluster.zone_gpus={dp}",
                 f"workload.global_batch_seqs={dp}", *overrides)
    out = iteration_formulas(scen, scalar_row(cfg), default_params(), SCALAR)
    return float(out["dp_comm_s"]), float(out["iteration_time_s"])


def test_gpt_layer_counts_its_tensors_and_a_llama_layer_its_weights():
    gpt = build_scenario("gpt3-175b", "metro-2bldg").model
    llama = build_scenario("llama3-8b", "metro-2bldg").model
    assert {k: v for k, v in fsdp_gather_counts(gpt).items() if k != "layer_modules"} == {"layer_linears": 4.0, "layer_tensors": 12.0}
    assert {k: v for k, v in fsdp_gather_counts(llama).items() if k != "layer_modules"} == {"layer_linears": 4.0, "layer_tensors": 6.0}


def test_unit_is_the_default_and_leaves_the_scenario_key_alone():
    a = build_scenario("gpt3-175b", "metro-2bldg")
    assert a.workload.fsdp_gather == "unit"
    assert a.key == build_scenario("gpt3-175b", "metro-2bldg", overrides=["workload.fsdp_gather=unit"]).key
    assert a.key != build_scenario("gpt3-175b", "metro-2bldg", overrides=["workload.fsdp_gather=module"]).key


def test_per_parameter_calls_cost_more_than_per_module_and_per_unit():
    unit, module, param = (_dp_s(g)[0] for g in ("unit", "module", "parameter"))
    assert param > module > unit > 0


def test_list_copies_grow_with_the_data_parallel_size():
    """Per-tensor calls pay world size x LIST_COLLECTIVE_COPY_s each: doubling the group adds at
    least the extra copies of every call (3 passes x 12 tensors x 96 layers), beyond the ring's
    own growth that the module reading also pays."""
    small, big = _dp_s("parameter", dp=64)[0], _dp_s("parameter", dp=128)[0]
    calls = 3 * 12 * 96
    assert big - small >= 0.99 * calls * 64 * C.LIST_COLLECTIVE_COPY_s


def test_other_flavours_ignore_the_granularity():
    for fl in ("ddp", "zero1"):
        cfg = Config(tp=1, pp=1, dp=64, dp_flavour=fl, micro_batch=1, placement="dp_out", recompute="full")
        outs = []
        for g in ("unit", "module", "parameter"):
            scen = _scen(g, "gpt3-175b", "cluster.buildings.0.gpus=64", "cluster.zone_gpus=64",
                         "workload.global_batch_seqs=64")
            outs.append(float(iteration_formulas(scen, scalar_row(cfg), default_params(), SCALAR)["iteration_time_s"]))
        assert outs[0] == outs[1] == outs[2]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([16, 32, 64, 128, 256]), st.sampled_from(["gpt3-175b", "llama3-8b", "llama3-70b"]))
def test_per_parameter_calls_never_speed_a_step_up(dp, model):
    """Property: per-tensor calls move the same bytes as per-unit or per-module ones in at least as
    many calls, with copies on top. (``module`` may beat ``unit``: its reduce-scatters run per
    5e8-element bucket, coarser than a layer of a small model.)"""
    t_unit, t_module, t_param = (_dp_s(g, dp=dp, model=model)[1] for g in ("unit", "module", "parameter"))
    assert t_param >= max(t_unit, t_module)


def _row(**kw):
    base = {"source": "DeepSpeed ZeRO-3 test", "model_name": "GPT-175B", "n_layers": "96", "hidden": "12288",
            "n_heads": "96", "seq_len": "2048", "gpu_type": "A100-SXM4-80GB", "n_gpus": "512", "tp": "1",
            "pp": "1", "dp": "512", "global_batch_seqs": "512", "zero_or_fsdp": "zero3", "framework": "deepspeed",
            "measured_metric": "tflops_per_gpu", "measured_value": "50"}
    base.update(kw)
    return base


@pytest.mark.parametrize("cell, gather", [
    ("", "module"), ("parameter", "parameter"), ("per tensor", "parameter"), ("ZeRO-3 per-param", "parameter"),
    ("DeepSpeed 0.5.4", "parameter"), ("0.5.4", "parameter"), ("v0.7.0", "module"), ("v0.10.3", "module"),
    ("deepspeed 0.10.0", "module"), ("coalesced", "module"), ("FSDP unit", "unit"), ("FSDP2", "unit"),
    ("torch 2.1 FSDP", "unit"), ("FSDP (torch 1.13)", "unit"), ("FSDP with use_orig_params", "unit"),
    ("module wrap policy (FSDP auto_wrap)", "unit"), ("megatron-core fsdp 0.12", "unit"),
    ("parameter (DeepSpeed v0.3-v0.5; coalesced gathers from v0.6)", "parameter")])
def test_the_column_reads_its_spellings_and_deepspeed_rows_default_to_module(tmp_path, cell, gather):
    runs = V.load_runs(_write(tmp_path, [_row(fsdp_gather=cell)]))
    (case,) = runs.cases
    assert case.scenario.workload.fsdp_gather == gather
    assert any(a.startswith("fsdp_gather=module (not stated") for a in case.assumptions) == (cell == "")


@pytest.mark.parametrize("cell", ["sometimes", "torch 2.0.4"])
def test_an_unreadable_cell_skips_the_row_naming_column_and_value(tmp_path, cell):
    runs = V.load_runs(_write(tmp_path, [_row(fsdp_gather=cell), _row()]))
    assert len(runs.cases) == 1
    (skip,) = runs.skipped
    assert skip["column"] == "fsdp_gather" and skip["value"] == cell


def test_a_non_fsdp_row_stays_at_unit(tmp_path):
    runs = V.load_runs(_write(tmp_path, [_row(zero_or_fsdp="zero1", fsdp_gather="")]))
    assert runs.cases[0].scenario.workload.fsdp_gather == "unit"


def test_per_parameter_gathers_are_never_hidden_behind_compute():
    """DeepSpeed <= v0.5 synchronized before each gather: overlap_dp asks for nothing there, while
    the per-unit and per-module readings hide part of their collectives with it."""
    for gather, same in (("parameter", True), ("unit", False), ("module", False)):
        off, on = (_dp_s(gather, dp=64, overlap=o)[1] for o in (0, 1))
        assert (off == on) == same, gather


def test_public_nvlink_bytes_count_the_experts_tp_gathers():
    """nvlink_bytes_per_gpu counts the sequence-parallel collectives and, for experts under TP,
    the dispatcher's gathers and reduce-scatters of the routed tokens (top_k copies at etp = tp)."""
    from autotune.costmodel import evaluate
    scen = build_scenario("mixtral-8x7b", "single-building", gpus=64, global_batch=256)
    folded, unfolded = (evaluate(scen, Config(tp=4, ep=8, etp=e, dp=16, micro_batch=1), check=False)
                        for e in (1, 4))
    m, L, k = 256 // 16, scen.model.n_layers, scen.model.moe_top_k
    routed = scen.seq_len * k * scen.model.hidden * 2 / 4          # a2a bytes a rank, per pass
    extra = m * L * 4 * (4 - 1) * routed                           # 4 passes, (etp - 1) x the a2a bytes
    assert unfolded.traffic["nvlink_bytes_per_gpu"] - folded.traffic["nvlink_bytes_per_gpu"] \
        == pytest.approx(extra, rel=1e-9)


def test_zero3_regathers_what_its_recompute_forward_released():
    """DeepSpeed's reuse distance (1e9 parameters): under full recomputation GPT-3 175B at tp 1
    gathers QKV, output and fc1 again for their backward (2/3 of the layer), fc2 stays; at tp 8,
    or for an 8B model's layer, everything stays."""
    from autotune.costmodel.scenario_consts import scenario_consts
    from autotune.costmodel.zero3 import zero3_refetch_share
    from autotune.costmodel.xp import SCALAR as X
    gpt = scenario_consts(_scen("module"), default_params())
    h = 12288
    assert zero3_refetch_share(gpt, 1.0, X) == pytest.approx((3 * h * h + h * h + 4 * h * h) / (12 * h * h))
    assert zero3_refetch_share(gpt, 8.0, X) == 0.0
    assert zero3_refetch_share(scenario_consts(_scen("module", "llama3-8b"), default_params()), 1.0, X) == 0.0


def test_the_regather_slows_full_recomputation_only_and_only_zero3():
    """Full recomputation under module / parameter granularity pays the extra gathers; selective
    recomputation and PyTorch FSDP's units (which keep their own reshard policy) do not."""
    def t(gather, rec):
        cfg = Config(tp=1, pp=1, dp=64, dp_flavour="fsdp", micro_batch=1, placement="dp_out", overlap_dp=0,
                     recompute=rec)
        scen = _scen(gather, "gpt3-175b", "cluster.buildings.0.gpus=64", "cluster.zone_gpus=64",
                     "workload.global_batch_seqs=64")
        return float(iteration_formulas(scen, scalar_row(cfg), default_params(), SCALAR)["dp_comm_s"])
    base = {g: t(g, "selective") for g in ("unit", "module")}
    assert t("module", "full") > base["module"] * 1.15
    assert t("unit", "full") == pytest.approx(base["unit"], rel=1e-9)


def _mem(gather, model="gpt3-175b", recompute="full"):
    dp = 64
    cfg = Config(tp=1, pp=1, dp=dp, dp_flavour="fsdp", micro_batch=1, placement="dp_out", recompute=recompute)
    scen = _scen(gather, model, f"cluster.buildings.0.gpus={dp}", f"cluster.zone_gpus={dp}",
                 f"workload.global_batch_seqs={dp}")
    return float(iteration_formulas(scen, scalar_row(cfg), default_params(), SCALAR)["memory_per_gpu_bytes"])


def test_zero3_by_module_holds_its_live_parameters_not_two_layers():
    """GPT-3 175B at tp 1: a unit-granular FSDP holds two layers gathered (2 x 1.81e9 parameters);
    DeepSpeed's coordinator holds the running fc1 (6.04e8), its prefetch (the 5e7 bucket plus at
    most one more tensor, fc1-sized) and, under full recomputation, fc2 (6.04e8, reused within
    1e9 parameters); without recomputation not fc2."""
    h, f = 12288, 49152
    layer = 4 * h * h + 2 * h * f
    fc = h * f
    live_full, live_none = 3 * fc + C.ZERO3_PREFETCH_BUCKET_ELEMS, 2 * fc + C.ZERO3_PREFETCH_BUCKET_ELEMS
    assert _mem("unit") - _mem("module") == pytest.approx(2.0 * (2 * layer - live_full), rel=1e-6)
    assert _mem("unit") - _mem("parameter") == pytest.approx(2.0 * (2 * layer - live_full), rel=1e-6)
    assert _mem("unit", recompute="none") - _mem("module", recompute="none") == pytest.approx(
        2.0 * (2 * layer - live_none), rel=1e-6)


def test_a_module_past_the_live_limit_is_not_prefetched_after():
    """The 530B shape's fc1 at tp 1 (1.68e9 parameters) passes stage3_max_live_parameters (1e9)
    alone, so nothing is prefetched while it runs: without recomputation the coordinator holds it
    alone."""
    from autotune.costmodel.scenario_consts import scenario_consts
    from autotune.costmodel.zero3 import zero3_live_params
    from autotune.costmodel.params import default_params
    scen = _scen("module", "gpt3-175b", "model.hidden=20480", "model.ffn_hidden=81920", "model.n_heads=128",
                 "model.n_kv_heads=128")
    k = scenario_consts(scen, default_params())
    assert zero3_live_params(k, 1.0, False, SCALAR) == pytest.approx(20480 * 81920, rel=1e-12)
    assert C.ZERO3_MAX_LIVE_PARAMETERS_ELEMS < 20480 * 81920


def test_zero3_live_parameters_never_exceed_two_layers():
    """A small layer (Llama-3 8B) under full recomputation keeps every module within the reuse
    distance, so the two-layer bound binds; without recomputation it holds fc1 and its prefetch,
    less than two layers."""
    assert _mem("module", model="llama3-8b") == pytest.approx(_mem("unit", model="llama3-8b"), rel=1e-9)
    assert _mem("module", model="llama3-8b", recompute="none") < _mem("unit", model="llama3-8b", recompute="none")
