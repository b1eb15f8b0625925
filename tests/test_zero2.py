"""ZeRO stage 2 (WorkloadSpec.shard_gradients): the zero1 flavour's collectives with the
gradients sharded over the data-parallel group as well (Rajbhandari et al. 2020, P_os+g:
2 + (4 + 12) / N_d bytes a parameter with fp32 main gradients)."""
from __future__ import annotations

import autotune.validation as V
from autotune.costmodel import evaluate
from autotune.specs import Config, build_scenario

from test_runs_schema import _write


def _scen(shard: bool):
    return build_scenario("llama3-70b", "single-building", gpus=64,
                          overrides=[f"workload.shard_gradients={str(shard).lower()}"])


def test_sharded_gradients_hold_the_unowned_share_less_and_cost_no_time():
    cfg = Config(tp=8, pp=2, dp=4, dp_flavour="zero1", micro_batch=1)
    a, b = evaluate(_scen(False), cfg, check=False), evaluate(_scen(True), cfg, check=False)
    per_rank = 70.6e9 / (cfg.tp * cfg.pp)
    # fp32 main gradients: 4 B on every parameter of the rank, 3/4 of them not owned at dp 4
    saved = a.memory_per_gpu_bytes - b.memory_per_gpu_bytes
    assert 0.97 * 4.0 * per_rank * 3 / 4 <= saved <= 1.15 * 4.0 * per_rank * 3 / 4
    assert b.iteration_time_s == a.iteration_time_s          # the same collectives
    # DDP and FSDP rows are unchanged by the flag (it is ZeRO-2 under zero1 only)
    for fl in ("ddp", "fsdp"):
        c = cfg.model_copy(update={"dp_flavour": fl})
        assert evaluate(_scen(True), c, check=False).memory_per_gpu_bytes == \
            evaluate(_scen(False), c, check=False).memory_per_gpu_bytes


def test_default_and_key():
    assert _scen(False).key == build_scenario("llama3-70b", "single-building", gpus=64).key
    assert _scen(True).key != _scen(False).key


def test_runs_column_reads_zero2_as_sharded_gradients(tmp_path):
    p = _write(tmp_path, [{"zero_or_fsdp": "ZeRO-2"}, {"zero_or_fsdp": "zero_stage: 2"}, {"zero_or_fsdp": "zero1"},
                          {"zero_or_fsdp": "dist-opt"}, {"zero_or_fsdp": '{"stage": 2}'}])
    cases, skipped = V.read_runs(p)
    assert not skipped
    assert [c.config.dp_flavour for c in cases] == ["zero1"] * 5
    assert [c.scenario.workload.shard_gradients for c in cases] == [True, True, False, False, True]
    # one data-parallel rank: nothing to shard over (DDP), the scenario as without ZeRO-2
    solo, _ = V.read_runs(_write(tmp_path, [{"zero_or_fsdp": "ZeRO-2", "n_gpus": "2", "dp": "1", "global_batch_seqs": "8"}]))
    assert solo[0].config.dp_flavour == "ddp" and not solo[0].scenario.workload.shard_gradients


def test_flash_attention_column(tmp_path):
    """The attention kernel a row states (``flash_attention``) decides fused or unfused; an empty
    cell keeps the source rule (unfused only for the sources before FlashAttention)."""
    from autotune.validation.columns import map_flash
    assert [map_flash(t) for t in ("FlashAttention-2", "SDPA FlashAttention-2", "cuDNN fused attention", "FA3",
                                   "flash_attn=true", "yes", "no", "unfused softmax", "math (eager)", "no flash")] == \
        [True, True, True, True, True, True, False, False, False, False]
    assert map_flash("banana") is None
    # the kernel named first wins; negations next to it, Megatron's fused softmax and SDPA's math
    # backend are unfused
    cases = {"FA2 (not FA3)": True, "FlashAttention (no sliding window)": True, "fused (no dropout)": True,
             "non-fused": False, "Megatron fused softmax": False, "use_flash_attn: 0": False, "Transformer Engine": True,
             "xformers": True, "memory-efficient": True, "SDPA (math backend)": False, "flash-attn 2": True}
    assert {t: map_flash(t) for t in cases} == cases
    p = _write(tmp_path, [{"flash_attention": "no"}, {"flash_attention": "FlashAttention-2"}, {},
                          {"flash_attention": "banana"}, {"flash_attention": "not stated"}])
    cases, skipped = V.read_runs(p)
    assert [c.scenario.workload.flash_attention for c in cases] == [False, True, True, True]
    assert len(skipped) == 1 and skipped[0].get("column") == "flash_attention" and skipped[0].get("value") == "banana"
    # the unfused row is slower: its scores go through HBM
    from autotune.costmodel import evaluate
    t = [evaluate(c.scenario, c.config, check=False).iteration_time_s for c in cases]
    assert t[0] > t[1] == t[2]
