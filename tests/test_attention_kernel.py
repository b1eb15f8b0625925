"""Which fused attention kernel runs (WorkloadSpec.attention_kernel): FlashAttention-2 on Hopper
and newer is slower than the native kernel by the FlashAttention-3 paper's measured ratio, on
Ampere it is the native kernel; the CSV spellings that name it."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel import constants as C
from autotune.costmodel import evaluate
from autotune.costmodel.kernels import fa2_speed_ratio
from autotune.costmodel.scenario_consts import scenario_consts
from autotune.costmodel.params import default_params
from autotune.specs import Config, Scenario
from autotune.specs.cluster import ClusterSpec, TierSpec
from autotune.specs.model import ModelSpec
from autotune.specs.presets import load_preset
from autotune.specs.workload import WorkloadSpec
from autotune.validation.columns import map_attention_kernel

MODEL = dict(n_layers=8, hidden=2048, ffn_hidden=5632, n_heads=16, n_kv_heads=4, vocab=32000, seq_len=4096)


def _scenario(gpu: str, kernel: str, seq: int = 4096, head_dim: int | None = None) -> Scenario:
    hw = load_preset("hardware", gpu)
    cluster = ClusterSpec(name="one-node", buildings=({"gpus": 8, "gpu": hw},),
                          scale_out=TierSpec(bandwidth_Bps=hw.nic_bandwidth_Bps, n_paths=8, latency_s=5e-6))
    model = ModelSpec(**{**MODEL, "seq_len": seq}, **({"head_dim": head_dim} if head_dim else {}))
    return Scenario(model=model, cluster=cluster,
                    workload=WorkloadSpec(global_batch_seqs=16, seq_len=seq, attention_kernel=kernel))


def test_ratio_is_the_papers_at_its_two_head_dims_and_flat_outside():
    assert fa2_speed_ratio(64) == C.FA2_HOPPER_SPEED_RATIO_HDIM64
    assert fa2_speed_ratio(128) == pytest.approx(C.FA2_HOPPER_SPEED_RATIO_HDIM128)
    assert fa2_speed_ratio(96) == pytest.approx((C.FA2_HOPPER_SPEED_RATIO_HDIM64 + C.FA2_HOPPER_SPEED_RATIO_HDIM128) / 2)
    assert fa2_speed_ratio(32) == fa2_speed_ratio(64) and fa2_speed_ratio(192) == fa2_speed_ratio(128)
    # the constants are the forward + backward combination of the paper's per-pass ratios
    paper = {64: ((321, 408, 279, 417), (322, 412, 287, 432), (324, 413, 291, 433)),
             128: ((368, 609, 310, 499), (370, 600, 318, 518), (370, 595, 322, 516))}
    for hd, const in ((64, C.FA2_HOPPER_SPEED_RATIO_HDIM64), (128, C.FA2_HOPPER_SPEED_RATIO_HDIM128)):
        combined = [3.5 / (c_f / fa2_f + 2.5 * c_b / fa2_b) for fa2_f, c_f, fa2_b, c_b in paper[hd]]
        assert sum(combined) / 3 == pytest.approx(const, abs=0.005)


@settings(max_examples=30, deadline=None)
@given(hd=st.integers(16, 512))
def test_ratio_is_monotone_and_bounded(hd):
    r = fa2_speed_ratio(hd)
    assert C.FA2_HOPPER_SPEED_RATIO_HDIM128 - 1e-12 <= r <= C.FA2_HOPPER_SPEED_RATIO_HDIM64 + 1e-12
    assert fa2_speed_ratio(hd + 1) <= r + 1e-12


def test_fa2_is_the_native_kernel_on_ampere():
    p = default_params()
    assert scenario_consts(_scenario("a100-80gb", "fa2"), p).attn_speed == 1.0
    cfg = Config(tp=2, pp=1, dp=4, micro_batch=1)
    assert evaluate(_scenario("a100-80gb", "fa2"), cfg).iteration_time_s == \
        evaluate(_scenario("a100-80gb", "native"), cfg).iteration_time_s


@settings(max_examples=20, deadline=None)
@given(seq=st.sampled_from([2048, 4096, 16384]), tp=st.sampled_from([1, 2, 4]),
       hd=st.sampled_from([64, 128]))
def test_fa2_on_hopper_is_slower_by_at_most_its_attention_core(seq, tp, hd):
    """Only the attention core slows: the step is never faster than native (equal where the
    host's launches set the pace), and slower by less than the whole step at the kernel's ratio."""
    cfg = Config(tp=tp, pp=1, dp=8 // tp, micro_batch=1)
    native = evaluate(_scenario("h100-sxm", "native", seq, hd), cfg, check=False).iteration_time_s
    fa2 = evaluate(_scenario("h100-sxm", "fa2", seq, hd), cfg, check=False).iteration_time_s
    assert native * (1 - 1e-12) <= fa2 < native / fa2_speed_ratio(hd)


def test_longer_sequences_feel_the_kernel_more():
    cfg = Config(tp=1, pp=1, dp=8, micro_batch=1)
    slow = [evaluate(_scenario("h100-sxm", "fa2", s), cfg, check=False).iteration_time_s
            / evaluate(_scenario("h100-sxm", "native", s), cfg, check=False).iteration_time_s for s in (2048, 8192, 32768)]
    assert slow[0] < slow[1] < slow[2]


def test_fa2_needs_fused_attention():
    with pytest.raises(ValueError, match="attention_kernel fa2 is a fused kernel"):
        WorkloadSpec(global_batch_seqs=16, seq_len=4096, flash_attention=False, attention_kernel="fa2")


@pytest.mark.parametrize("text,kernel", [
    ("SDPA FlashAttention-2", "fa2"), ("FlashAttention-2", "fa2"), ("flash-attn 2.5.8", "fa2"),
    ("flash_attn v2", "fa2"), ("FA2", "fa2"), ("fa-2 via sdpa", "fa2"), ("flash-attn>=2.5.0,<2.7.0", "fa2"),
    ("FlashAttention 2.x (nanotron)", "fa2"),
    ("FlashAttention-3", "native"), ("FA3", "native"), ("cuDNN fused attention", "native"), ("TE", "native"),
    ("Transformer Engine DotProductAttention", "native"), ("splash attention", "native"),
    ("cuDNN (not FlashAttention-2)", "native"), ("FlashAttention2", "fa2"), ("flash attention (v2)", "fa2"),
    ("flash_attn==2.6.3", "fa2"), ("FA 2", "fa2"), ("FA-2", "fa2"), ("SDPA (flash backend)", "fa2"),
    ("torch sdpa flash", "fa2"), ("TE with FlashAttention-2", "fa2"), ("Transformer Engine (FA2 backend)", "fa2"),
    ("FA2 disabled (cuDNN)", "native"), ("without FlashAttention-2, cuDNN", "native"), ("not FA2: FA3", "native"),
    ("FlashAttention-3 (not FA2)", "native"), ("TE fused attn (cuDNN)", "native"), ("FA4", "native"),
    ("xformers", None), ("FlashAttention-1", None),
    ("FlashAttention", None), ("yes", None), ("SDPA", None), ("", None), ("flash-attn 2x faster", None),
])
def test_attention_kernel_spellings(text, kernel):
    assert map_attention_kernel(text) == kernel


def test_a_mixed_cluster_takes_its_slowest_gpus_kernel_speed():
    """The scenario's constants pace the slowest GPU (an A100 beside H100s: FA2 is its native
    kernel); each GPU type's own constants (hetero.speed_types) keep their ratio."""
    a100, h100 = load_preset("hardware", "a100-80gb"), load_preset("hardware", "h100-sxm")
    p = default_params()
    for gpus, want in (((a100, h100), 1.0), ((h100, load_preset("hardware", "h200")), fa2_speed_ratio(128))):
        tier = TierSpec(bandwidth_Bps=a100.nic_bandwidth_Bps, n_paths=8, latency_s=5e-6)
        cluster = ClusterSpec(name="mixed", buildings=tuple({"gpus": 8, "gpu": g} for g in gpus),
                              scale_out=tier, cross_building=tier)
        scen = Scenario(model=ModelSpec(**MODEL, head_dim=128), cluster=cluster,
                        workload=WorkloadSpec(global_batch_seqs=16, seq_len=4096, attention_kernel="fa2"))
        assert scenario_consts(scen, p).attn_speed == pytest.approx(want)


def test_the_cli_names_the_setting_in_one_line(run_cli):
    base = ("evaluate", "--model", "llama3-8b", "--cluster", "single-building", "--gpus", "64",
            "--config", "tp=8,pp=1,dp=8")
    bad = run_cli(*base, "--set", "workload.attention_kernel=fa9")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "autotune: error: workload.attention_kernel: got 'fa9'; allowed: Input should be 'native' or 'fa2'"]
    both = run_cli(*base, "--set", "workload.attention_kernel=fa2", "--set", "workload.flash_attention=false")
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 1
    assert "attention_kernel fa2 is a fused kernel: it needs flash_attention true" in both.stderr
    assert "Value error" not in both.stderr          # pydantic's prefix is not the user's business
    ok = run_cli(*base, "--set", "workload.attention_kernel=fa2")
    assert ok.returncode == 0, ok.stderr
