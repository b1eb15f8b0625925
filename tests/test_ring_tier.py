"""A data-parallel ring or tree over nodes runs on the node's NICs together (ring_tier_of_span):
property tests of the rate and latency it gives, and its effect on a whole evaluation."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from autotune.costmodel import evaluate
from autotune.configparse import make_config
from autotune.costmodel.params import default_params
from autotune.costmodel.scenario_consts import scenario_consts
from autotune.costmodel.spans import ring_tier_of_span, tier_of_span
from autotune.costmodel.xp import NUMPY, SCALAR
from autotune.specs import build_scenario

K = scenario_consts(build_scenario("llama3-70b", "campus-5bldg"), default_params())


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16, 32]), st.integers(2, 4096))
def test_rate_and_latency_of_a_ring_over_nodes(stride, n_in):
    bw, a = ring_tier_of_span(K, float(stride), float(n_in), SCALAR)
    bw1, a1 = tier_of_span(K, float(stride * n_in), SCALAR)
    if stride >= K.node or stride * n_in <= K.node:     # one member per node, or inside a node
        assert (bw, a) == (bw1, a1)
        return
    m = K.node / stride
    assert bw1 <= bw <= K.nvlink_Bps and bw == min(m * bw1, K.nvlink_Bps)
    assert K.nvlink_alpha_s <= a <= a1
    # fewer members per node never give a faster ring
    bw2, a2 = ring_tier_of_span(K, float(2 * stride), float(n_in), SCALAR)
    assert bw2 <= bw and a2 >= a
    # the batch form is the scalar form
    bwv, av = ring_tier_of_span(K, np.array([float(stride)]), np.array([float(n_in)]), NUMPY)
    assert float(bwv[0]) == bw and float(av[0]) == a


def test_data_parallel_time_falls_with_members_per_node():
    """One building, a DDP ring over 512 ranks in 1 GiB buckets (bandwidth-bound): with tp=1
    (pp=8) a DP group has 8 members per node and its ring runs on the node's 8 NICs; with tp=8
    it has one member per node and one NIC. Link seconds per byte: at least 3x fewer with tp=1
    (8 NICs, capped by NVLink's realised rate)."""
    sc = build_scenario("llama3-8b", "single-building", global_batch=4096)
    base = dict(cp=1, ep=1, dp=512, placement="dp_out", dp_flavour="ddp", pp_schedule="1f1b", pp_chunks=1,
                recompute="full", micro_batch=1, dp_bucket_mib=1024, collective="ring", nccl_protocol="simple")
    per_byte = []
    for tp, pp in ((1, 8), (8, 1)):
        d = evaluate(sc, make_config({**base, "tp": tp, "pp": pp}, 4096)).tiers["dp"]
        bus = d["scale_out"]["bytes_per_gpu"] + d["nvlink"]["bytes_per_gpu"]
        per_byte.append(d["scale_out"]["link_s"] / bus)
        # a member's NIC carries 1/m of its ring bytes (m = 8 / tp members per node), NVLink the rest
        assert d["scale_out"]["bytes_per_gpu"] == pytest.approx(bus * tp / 8)
    assert 0 < 3 * per_byte[0] < per_byte[1], per_byte


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([2, 4, 8, 16, 64, 256]), st.sampled_from([1, 2, 4, 8]), st.floats(1e5, 1e10),
       st.floats(1e9, 1e11), st.floats(1.0, 20.0))
@example(4, 2, 100000.0, 6118558874.966475, 1.5)     # CI, 2026-11-30: equal times, 1 ulp apart
def test_all_to_all_keeps_a_nodes_share_on_nvlink(n, m, size, bw, nvlink_over_nic):
    """Expert-parallel all-to-all with m members per node: (m-1)/n of the data rides NVLink and
    (n-m)/n the NIC, at once. One member per node is the old all-NIC formula; more members per
    node never make it slower while NVLink carries its larger share no slower than the NIC its
    own (H100: NVLink 9x the NIC); a whole group in one node is all NVLink."""
    from autotune.costmodel.collectives import all_to_all_time
    m = min(m, n)
    nvl = bw * nvlink_over_nic
    t = all_to_all_time(size, float(n), bw, 1e-5, SCALAR, float(m), nvl)
    assert all_to_all_time(size, float(n), bw, 1e-5, SCALAR, 1.0, nvl) == \
        all_to_all_time(size, float(n), bw, 1e-5, SCALAR)
    if 2 * m <= n and nvlink_over_nic >= (2 * m - 1) / max(n - m, 1):
        assert all_to_all_time(size, float(n), bw, 1e-5, SCALAR, float(2 * m), nvl) <= t * (1 + 1e-12)   # equal at the boundary, to rounding
    if m == n:
        assert abs(t - ((n - 1) / n * size / nvl + 1e-5)) <= 1e-12 * t
