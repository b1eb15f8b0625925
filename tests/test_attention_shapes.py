"""Attention shapes (issue 13): head_dim independent of hidden / heads, MLA, sliding windows.
Each term's invariants as property tests, plus the published parameter counts they must give."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel import evaluate
from autotune.specs import Config, Scenario
from autotune.specs.cluster import ClusterSpec, TierSpec
from autotune.specs.model import ModelSpec
from autotune.specs.presets import load_preset
from autotune.specs.workload import WorkloadSpec

BASE = dict(n_layers=16, hidden=2048, ffn_hidden=5632, n_heads=16, n_kv_heads=4, vocab=32000, seq_len=4096)
CFG = Config(tp=2, pp=1, dp=4, micro_batch=1)


def _time(model: ModelSpec, cfg: Config = CFG, seq: int | None = None) -> float:
    hw = load_preset("hardware", "h100-sxm")
    cluster = ClusterSpec(name="one-node", buildings=({"gpus": 8, "gpu": hw},),
                          scale_out=TierSpec(bandwidth_Bps=hw.nic_bandwidth_Bps, n_paths=8, latency_s=5e-6))
    scen = Scenario(model=model, cluster=cluster,
                    workload=WorkloadSpec(global_batch_seqs=16, seq_len=seq or model.seq_len))
    return evaluate(scen, cfg, check=False).iteration_time_s


def test_explicit_head_dim_equal_to_default_changes_nothing():
    a = ModelSpec(**BASE)
    b = ModelSpec(**BASE, head_dim=BASE["hidden"] // BASE["n_heads"])
    assert a.attn_params == b.attn_params and a.kv_width == b.kv_width
    assert _time(a) == _time(b)


def test_gqa_parameter_count_matches_the_closed_form():
    m = ModelSpec(**BASE)
    h, kv = m.hidden, m.hidden // m.n_heads * m.n_kv_heads
    assert m.attn_params == 2 * h * h + 2 * h * kv


@settings(max_examples=25, deadline=None)
@given(hd=st.sampled_from([64, 96, 128, 192, 256]))
def test_wider_heads_cost_more(hd):
    """Attention projections and core grow with head_dim at fixed heads: never faster."""
    narrow = ModelSpec(**BASE, head_dim=hd)
    wide = ModelSpec(**BASE, head_dim=2 * hd)
    assert wide.attn_params > narrow.attn_params
    assert _time(wide) >= _time(narrow)


def test_deepseek_v3_mla_gives_the_published_parameter_counts():
    """DeepSeek-V3 (arXiv:2412.19437): 671B total, 37B activated per token."""
    m = load_preset("model", "deepseek-v3")
    assert m.attention == "mla"
    assert abs(m.total_params / 671e9 - 1) < 0.01
    assert abs(m.active_params / 37e9 - 1) < 0.03


def test_mla_needs_its_ranks():
    with pytest.raises(ValueError, match="kv_lora_rank"):
        ModelSpec(**BASE, attention="mla")
    with pytest.raises(ValueError, match="mla only"):
        ModelSpec(**BASE, kv_lora_rank=512)


@settings(max_examples=25, deadline=None)
@given(w=st.integers(1, 1 << 14), frac=st.floats(0.0, 1.0))
def test_sliding_window_keys_bounded_and_monotone(w, frac):
    """Keys per query: a window never adds work; a wider window never removes it; a window at
    least the sequence is no window."""
    s = 4096
    n_local = int(round(frac * BASE["n_layers"])) or 1
    m = ModelSpec(**BASE, sliding_window=w, sliding_window_layers=n_local)
    wider = ModelSpec(**BASE, sliding_window=w + 1, sliding_window_layers=n_local)
    full = ModelSpec(**BASE).attention_keys_per_query(s, True)
    k = m.attention_keys_per_query(s, True)
    assert 0 < k <= full + 1e-9
    assert wider.attention_keys_per_query(s, True) >= k - 1e-9
    if w >= s:
        assert math.isclose(k, full)
    # an unfused kernel computes every score whatever the window
    assert m.attention_keys_per_query(s, False) == s


def test_sliding_window_saves_time_on_long_sequences():
    full = ModelSpec(**BASE)
    local = ModelSpec(**BASE, sliding_window=1024, sliding_window_layers=12)
    assert _time(local, seq=32768) < _time(full, seq=32768)


def test_activation_kinds_count_their_matrices():
    for act, mats in (("swiglu", 3), ("geglu", 3), ("gelu", 2), ("relu", 2), ("squared_relu", 2)):
        assert ModelSpec(**BASE, activation=act).mlp_matrices == mats
