"""The chunk-level collective simulation (collsim.py) and the closed forms that follow it."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel import nccl as N
from autotune.costmodel.collectives import KIND_AG, KIND_AR, p2p_time, ring_time, tree_allreduce_time
from autotune.costmodel.collsim import (RingHops, nccl_btree, nccl_dtree, simulate_p2p, simulate_ring,
                                        simulate_tree_allreduce, tree_path)

SIMPLE, LL128 = N.PROTO_SIMPLE, N.PROTO_LL128


def uniform(n, bw=25e9, lat=5e-6, ovh=0.0):
    return RingHops.two_tier(n, 1, bw, lat, bw, lat, ovh, ovh)


@pytest.mark.parametrize("kind,steps", [("allreduce", 2), ("allgather", 1)])
@pytest.mark.parametrize("n", [4, 16])
def test_uniform_single_tier_gives_the_alpha_beta_formula(kind, steps, n):
    """Thakur et al. 2005: k/n S / bw + k alpha with k = steps (n-1); large messages, short links."""
    S, bw, lat = 2e9, 25e9, 5e-6
    sim = simulate_ring(kind, S, uniform(n, bw, lat), SIMPLE, channels=4)
    k = steps * (n - 1)
    alpha_beta = k / n * S / bw + k * lat
    assert sim == pytest.approx(alpha_beta, rel=0.05)


def test_window_bounds_a_long_link():
    """One Simple connection keeps NCCL_BUFFSIZE in flight: goodput <= channels x 4 MiB / RTT."""
    lat = 5e-3                                               # 1,000 km one way
    t = simulate_p2p(1e9, 50e9, lat, channels=1, chunk_bytes=N.SIMPLE_BUFFER_BYTES_DEFAULT / N.NCCL_STEPS)
    window_rate = N.SIMPLE_BUFFER_BYTES_DEFAULT / (2 * lat)
    assert 1e9 / t == pytest.approx(window_rate, rel=0.05)
    hops = RingHops.two_tier(2, 2, 50e9, 5e-6, 50e9, lat, 0.0, 0.0)
    ring = simulate_ring("allgather", 4e9, hops, SIMPLE, channels=1)
    assert ring > 4e9 * 3 / 4 / window_rate * 0.95            # far slower than line rate (0.06 s)


def test_simple_pays_about_half_a_round_trip_per_step_ll128_a_quarter_of_that():
    lat = 1e-3
    hops = RingHops.two_tier(4, 2, 50e9, 5e-6, 50e9, lat, 0.0, 0.0)
    k = 2 * (8 - 1)
    simple = simulate_ring("allreduce", 64e3, hops, SIMPLE)
    ll128 = simulate_ring("allreduce", 64e3, hops, LL128)
    assert simple == pytest.approx(k * lat, rel=0.15)           # ~RTT/2 per step
    assert ll128 < simple / 2.5


@settings(max_examples=25, deadline=None)
@given(lat_ms=st.floats(0.005, 5.0), more=st.floats(1.0, 8.0), S=st.floats(1e5, 5e8), ch=st.sampled_from([1, 2, 4, 8]),
       proto=st.sampled_from([SIMPLE, LL128]))
def test_simulation_is_monotone_in_latency_window_and_channels(lat_ms, more, S, ch, proto):
    def run(lat, chn, buf=N.SIMPLE_BUFFER_BYTES_DEFAULT):
        hops = RingHops.two_tier(4, 2, 25e9, 5e-6, 12e9, lat, 2e-6, 2e-6)
        return simulate_ring("allreduce", S, hops, proto, chn, buf)
    lat = lat_ms * 1e-3
    base = run(lat, ch)
    assert run(lat * more, ch) >= base * (1 - 1e-9)
    assert run(lat, ch * 2) <= base * (1 + 0.02)              # more channels never slower (slicing granularity)
    if proto == SIMPLE:
        assert run(lat, ch, 4 * N.SIMPLE_BUFFER_BYTES_DEFAULT) <= base * (1 + 0.02)


@settings(max_examples=30, deadline=None)
@given(n_in=st.sampled_from([8, 32]), n_x=st.sampled_from([2, 4, 5]), S=st.floats(1e6, 2e9),
       km=st.floats(1.0, 1000.0), ch=st.sampled_from([1, 2, 4, 8, 16]), proto=st.sampled_from([SIMPLE, LL128]),
       kind=st.sampled_from(["allreduce", "allgather"]))
def test_closed_form_follows_the_simulation(n_in, n_x, S, km, ch, proto, kind):
    """Per case within 25% over the sweep's domain (experiments/collective_closed_form_check.py:
    median 0%, max 10%). Rings of 2 ranks per building are outside it: there the first loop's
    chain estimate can be 25% high (4 ranks, 1 MB, 25 km: 0.67 ms vs 0.54 ms simulated)."""
    a_x = 10e-6 + 5e-6 * km
    o = N.NET_STEP_OVERHEAD_s[proto]
    hops = RingHops.two_tier(n_in, n_x, 50e9, 5e-6, 12.5e9, a_x, o, o)
    sim = simulate_ring(kind, S, hops, proto, ch, base_latency_s=N.RING_BASE_LATENCY_s[proto])
    cf = ring_time(KIND_AR if kind == "allreduce" else KIND_AG, S, n_in, n_x, 50e9, 5e-6, 12.5e9, a_x, proto, ch,
                   N.SIMPLE_BUFFER_BYTES_DEFAULT)
    assert cf == pytest.approx(sim, rel=0.25)


@settings(max_examples=30, deadline=None)
@given(S=st.floats(1e3, 1e9), lat=st.floats(1e-6, 1e-2), ch=st.sampled_from([1, 2, 4, 8]))
def test_p2p_closed_form_is_exact(S, lat, ch):
    o = N.NET_STEP_OVERHEAD_s[SIMPLE] / N.RING_SLOTS_PER_STEP[SIMPLE]
    assert float(p2p_time(S, 12.5e9, lat, float(ch))) == pytest.approx(simulate_p2p(S, 12.5e9, lat, o, ch), rel=1e-9)


def test_pipelined_ring_is_not_the_sum_of_hop_latencies():
    """The 'pipelined ring pays the sum of its hop latencies' shortcut is far too optimistic for a
    64 MB all-reduce across 100 km: bounded buffers make it window bound."""
    a_x = 10e-6 + 5e-6 * 100
    hops = RingHops.two_tier(32, 2, 50e9, 5e-6, 12.5e9, a_x, 0.0, 0.0)
    sim = simulate_ring("allreduce", 64e6, hops, SIMPLE, channels=1)
    n = 64
    shortcut = 2 * (n - 1) / n * 64e6 / 12.5e9 + 2 * a_x + (n - 2) * 5e-6
    assert sim > 3 * shortcut
    assert math.isfinite(sim)


# ---------------------------------------------------------------------------------- the tree
def test_btree_and_dtree_are_ncclS():
    """The diagrams in NCCL's src/graph/trees.cc: 14 ranks; the mirror (12) and the shift (13)."""
    assert nccl_btree(14).tolist() == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12]
    assert nccl_dtree(12)[1].tolist() == [1, 3, 1, 11, 5, 7, 5, 3, 9, 7, 9, -1]
    assert nccl_dtree(13)[1].tolist() == [9, -1, 3, 5, 3, 9, 7, 5, 7, 1, 11, 0, 11]


def test_tree_path_crosses_buildings_near_the_top_only():
    """Contiguous buildings: the worst root-to-leaf path crosses ceil(log2 n_x) + 1 times (the
    building sub-trees hang off each other), the rest of its log2 n levels stay inside."""
    assert tree_path(32, 1) == (5, 0)
    for n_in, n_x, x in [(8, 2, 2), (32, 4, 3), (128, 5, 4)]:
        lin, lx = tree_path(n_in, n_x)
        assert lx == x and lin + lx <= math.ceil(math.log2(n_in * n_x)) + 1


@pytest.mark.parametrize("n", [8, 32])
def test_tree_uniform_single_tier_gives_twice_the_message_over_the_bandwidth(n):
    """A large tree all-reduce on one tier, no software overhead: every rank sends 2 S (up and
    down, both trees; NCCL's tree bus bandwidth factor of 2 in tuning.cc), plus the path latency."""
    S, bw, lat = 2e9, 25e9, 5e-6
    sim = simulate_tree_allreduce(S, n, 1, bw, lat, bw, lat, 0.0, 0.0, SIMPLE, channels=4)
    assert sim == pytest.approx(2 * S / bw + 2 * math.log2(n) * lat, rel=0.05)


@settings(max_examples=15, deadline=None)
@given(lat_ms=st.floats(0.005, 5.0), more=st.floats(1.0, 8.0), S=st.floats(1e5, 1e9), ch=st.sampled_from([2, 4, 8]),
       proto=st.sampled_from([SIMPLE, LL128]))
def test_tree_simulation_is_monotone_in_latency_and_channels(lat_ms, more, S, ch, proto):
    def run(lat, chn):
        return simulate_tree_allreduce(S, 4, 2, 25e9, 5e-6, 12e9, lat, 2e-6, 2e-6, proto, chn)
    lat = lat_ms * 1e-3
    base = run(lat, ch)
    assert run(lat * more, ch) >= base * (1 - 1e-9)
    # more channels: each chunk crosses a hop at a lower rate; only with many more chunks per channel
    # than hops on the path (8 x here) is that hidden (below it, why NCCL's tuner gives small
    # messages fewer channels)
    if S / (2 * 2 * ch) >= 8 * 8 * N.slot_data_bytes(proto):     # true of the doubled count too
        assert run(lat, ch * 2) <= base * (1 + 0.02)


@settings(max_examples=25, deadline=None)
@given(n_in=st.sampled_from([8, 32]), n_x=st.sampled_from([1, 2, 4, 5]), S=st.floats(1e6, 1e9),
       km=st.floats(1.0, 1000.0), ch=st.sampled_from([2, 4, 8, 16]), proto=st.sampled_from([SIMPLE, LL128]))
def test_tree_closed_form_follows_the_simulation(n_in, n_x, S, km, ch, proto):
    """Within 30% per case (the sweep: median 0.2-0.3%, max 15-19%). Messages of about 1 MB
    reach 25%: the closed form's latency path charges every hop a whole chunk at the shared rate."""
    a_x = 10e-6 + 5e-6 * km
    o = N.NET_STEP_OVERHEAD_s[proto]
    sim = simulate_tree_allreduce(S, n_in, n_x, 50e9, 5e-6, 12.5e9, a_x, o, o, proto, ch,
                                  base_latency_s=N.TREE_BASE_LATENCY_s[proto])
    cf = tree_allreduce_time(S, n_in, n_x, 50e9, 5e-6, 12.5e9, a_x, proto, ch, N.SIMPLE_BUFFER_BYTES_DEFAULT)
    assert float(cf) == pytest.approx(sim, rel=0.30)


def test_tree_closed_form_is_the_same_for_scalars_and_arrays():
    import numpy as np
    from autotune.costmodel.xp import SCALAR
    args = (3e8, 32.0, 4.0, 50e9, 5e-6, 12.5e9, 2e-3, float(LL128), 4.0, float(N.SIMPLE_BUFFER_BYTES_DEFAULT))
    one = tree_allreduce_time(*args, xp=SCALAR)
    arr = tree_allreduce_time(*(np.array([a, a]) for a in args))
    assert arr.tolist() == pytest.approx([one, one], rel=1e-12)


# ---------------------------------------------------------------------------------- PAT
def _nccl_trace(path):
    """A getNextOp trace from NCCL 2.30.7's PatAGAlgorithm (collectives.h compiled in a host
    harness, rank 0, 512 KiB steps and chunks): (send dim, recv dim, post send, post recv,
    nelem, block offset) per non-skipped op."""
    import re
    out = []
    size = int(re.search(r"_(\d+)\.txt$", str(path))[1])
    for line in open(path):
        m = re.search(r"send dim (-?\d+)\(off -?\d+ post (\d)\) recv dim (-?\d+)\(off -?\d+ post (\d)\).*outIx (\d+) "
                      r"nelem (\d+)", line)
        sd, ps, rd, pr = int(m[1]), int(m[2]), int(m[3]), int(m[4])
        out.append((sd, rd, ps if sd >= 0 else 0, pr if rd >= 0 else 0, int(m[6]), int(m[5]) // size))
    return out


@pytest.mark.parametrize("name", ["ag_8_524288", "ag_12_2000000", "ag_32_100000", "ag_48_20000", "ag_64_524288"])
def test_pat_op_stream_is_nccls(name):
    """The ported getNextOp gives NCCL's op stream op for op: powers of two and not, one and
    several chunks, aggregated small blocks (tests/data/nccl_pat)."""
    from pathlib import Path
    from autotune.costmodel.patsim import pat_ag_ops
    path = Path(__file__).parent / "data" / "nccl_pat" / f"{name}.txt"
    n, size = (int(v) for v in name.split("_")[1:])
    mine = [(o.send_dim, o.recv_dim, int(o.post_send), int(o.post_recv), o.nelem, o.block)
            for o in pat_ag_ops(n, 524288, size)]
    assert mine == _nccl_trace(path)


def test_pat_moves_each_block_once_per_rank():
    """Every rank receives n - 1 blocks and sends n - 1 (helper-checked against NCCL for 3-64 ranks):
    n_d = floor((n - 1 - 2^d) / 2^(d+1)) + 1 blocks on dimension d."""
    from autotune.costmodel.patsim import pat_ag_ops
    for n in (3, 6, 8, 12, 33):
        ops = pat_ag_ops(n, 1 << 19, 1 << 19)
        sends = [o for o in ops if o.send_dim >= 0]
        assert len(sends) == n - 1
        for d in range(math.ceil(math.log2(n))):
            assert sum(o.send_dim == d for o in sends) == (n - 1 - 2**d) // 2**(d + 1) + 1


def test_pat_uniform_single_tier_is_bandwidth_bound_for_large_messages():
    from autotune.costmodel.patsim import simulate_pat_allgather
    n, S, bw = 16, 4e9, 25e9
    t = simulate_pat_allgather(S, n, 1, bw, 2e-6, bw, 2e-6, 0.0, channels=4)
    assert t == pytest.approx((n - 1) / n * S / bw, rel=0.05)


@settings(max_examples=15, deadline=None)
@given(lat_ms=st.floats(0.005, 5.0), more=st.floats(1.0, 8.0), S=st.floats(1e5, 2e9), ch=st.sampled_from([1, 2, 4, 8]),
       n_in=st.sampled_from([8, 16]), n_x=st.sampled_from([2, 3, 4, 5]))
def test_pat_simulation_is_monotone_in_latency_and_closed_form_follows_it(lat_ms, more, S, ch, n_in, n_x):
    """Monotone in the crossing latency; the closed form within 0.7x-1.6x of the simulation per
    case. The sweep (experiments/collective_closed_form_check.py: each rank's share of a 12.5 GB/s
    uplink) gives median 0.1%, p90 4%, max 11-20% by seed; a random search of this test's domain
    (6,090 cases) finds the tails: overestimates up to 51% in 16-rank groups over 2 buildings
    (1-2 GB, ~4 ms), where a round's serialisation and latency are alike and the closed form adds
    both while the simulation overlaps them in part; underestimates down to -28% in 24-80-rank
    groups over 3-5 buildings (5-90 MB, 2.5-5 ms, 1-2 channels). Known limits, both stated."""
    from autotune.costmodel.collectives import pat_time
    from autotune.costmodel.patsim import simulate_pat_allgather
    o = N.NET_STEP_OVERHEAD_s[SIMPLE] / N.RING_SLOTS_PER_STEP[SIMPLE]

    bw_x = 12.5e9 / n_in

    def run(lat):
        return simulate_pat_allgather(S, n_in, n_x, 50e9, 5e-6, bw_x, lat, o, ch, base_latency_s=N.PAT_BASE_LATENCY_s)
    lat = lat_ms * 1e-3
    base = run(lat)
    assert run(lat * more) >= base * (1 - 1e-9)
    cf, _ = pat_time(KIND_AG, S, n_in, n_x, 50e9, 5e-6, bw_x, lat, ch, N.SIMPLE_BUFFER_BYTES_DEFAULT)
    assert 0.7 * base <= float(cf) <= 1.6 * base


def test_nccl_tuner_takes_pat_for_mid_sized_gathers_with_one_rank_per_node_only():
    """tuning.cc's estimates at 512 ranks, 25 GB/s: PAT (log latency plus 2.8 us a rank, 0.75
    bandwidth) beats every ring protocol at 10 MB (ring LL 2.2 ms, LL128 2.5 ms, PAT 2.0 ms), a
    ring wins at 1 GB; at 64 ranks ring LL / LL128 win (their per-step latency is too small to
    lose); never without one rank per node."""
    from autotune.costmodel.collectives import nccl_choice
    assert nccl_choice(KIND_AG, 1e7, 512.0, 25e9, pat_ok=1.0)[0]
    assert not nccl_choice(KIND_AG, 1e9, 512.0, 25e9, pat_ok=1.0)[0]
    assert not nccl_choice(KIND_AG, 1e7, 64.0, 25e9, pat_ok=1.0)[0]
    assert not nccl_choice(KIND_AG, 1e7, 512.0, 25e9, pat_ok=0.0)[0]


def test_pat_closed_form_is_the_same_for_scalars_and_arrays():
    import numpy as np
    from autotune.costmodel.collectives import pat_time
    from autotune.costmodel.xp import SCALAR
    args = (3e7, 32.0, 4.0, 50e9, 5e-6, 2e9, 2e-3, 4.0, float(N.SIMPLE_BUFFER_BYTES_DEFAULT))
    one = pat_time(KIND_AG, *args, xp=SCALAR)
    arr = pat_time(KIND_AG, *(np.array([a, a]) for a in args))
    for o, a in zip(one, arr):
        assert a.tolist() == pytest.approx([o, o], rel=1e-12)
