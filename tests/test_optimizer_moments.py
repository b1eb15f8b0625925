"""Adam's moments in bf16 (WorkloadSpec.optimizer_moments; Megatron-Core's precision-aware
optimizer, DeepSeek-V3's report sec. 3.3.2): 4 B of optimizer state fewer a parameter, 8 B less
traffic in the Adam step."""
from __future__ import annotations

import pytest

import autotune.validation as V
from autotune.costmodel import evaluate
from autotune.costmodel.scenario_consts import precision_bytes
from autotune.specs import Config, build_scenario

from test_runs_schema import _write


def _scen(moments="fp32", gpus=64):
    return build_scenario("llama3-70b", "single-building", gpus=gpus,
                          overrides=[f"workload.optimizer_moments={moments}"])


def test_bf16_moments_hold_4_bytes_less_per_owned_parameter():
    assert precision_bytes("bf16", "bf16")[3] == precision_bytes("bf16")[3] - 4.0 == 8.0
    assert precision_bytes("fp32", "bf16")[3] == 4.0
    for cfg in (Config(tp=8, pp=8, dp=1, dp_flavour="ddp", micro_batch=1),          # every parameter owned
                Config(tp=8, pp=2, dp=4, dp_flavour="zero1", micro_batch=1)):       # a quarter owned
        a, b = evaluate(_scen(), cfg, check=False), evaluate(_scen("bf16"), cfg, check=False)
        owned = 70.6e9 / (cfg.tp * cfg.pp) / (cfg.dp if cfg.dp_flavour == "zero1" else 1)
        # the bottleneck rank holds a little more than the average share (the head or the embedding)
        assert 0.97 * 4.0 * owned <= a.memory_per_gpu_bytes - b.memory_per_gpu_bytes <= 1.15 * 4.0 * owned
        assert b.iteration_time_s < a.iteration_time_s


def test_default_and_key():
    assert _scen().key == build_scenario("llama3-70b", "single-building", gpus=64).key
    assert _scen("bf16").key != _scen().key
    with pytest.raises(ValueError):
        _scen("fp16")


def test_runs_column(tmp_path):
    p = _write(tmp_path, [{"optimizer_moments": "BF16 optimizer states"}, {"optimizer_moments": "--exp-avg-dtype fp32"},
                          {}, {"optimizer_moments": "int8"}])
    cases, skipped = V.read_runs(p)
    assert [c.scenario.workload.optimizer_moments for c in cases] == ["bf16", "fp32", "fp32"]
    assert len(skipped) == 1 and skipped[0].get("column") == "optimizer_moments" and skipped[0].get("value") == "int8"
