"""Closed-form collective and send/recv times (autotune/costmodel/collectives.py) against the
chunk-level event simulation (autotune/costmodel/collsim.py), over a seeded sweep.

    python experiments/collective_closed_form_check.py [--cases 300] [--seed 0] [--out FILE.json]

Cases: ring all-reduce and all-gather over n_in in {8, 32, 128} ranks per building x {2, 4, 5}
buildings, NCCL's double-binary-tree all-reduce, NCCL's PAT all-gather (one rank per node,
every rank crossing at once on its share of the uplink), hierarchical all-reduce, and
cross-building send/recv (an equal share of each); sizes 1 MB - 10 GB (log-uniform),
1 - 1,000 km of fibre, 1 - 16 channels, Simple and LL128. Prints median and max |error| per kind
and overall, and the worst cases. Nothing here is fitted: both sides take the same inputs.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.costmodel import nccl as N  # noqa: E402
from autotune.costmodel.collectives import (KIND_AG, KIND_AR, p2p_time, pat_time, ring_time,  # noqa: E402
                                           tree_allreduce_time)
from autotune.costmodel.collsim import (RingHops, simulate_hierarchical_allreduce, simulate_p2p,  # noqa: E402
                                        simulate_ring, simulate_tree_allreduce)
from autotune.costmodel.patsim import simulate_pat_allgather  # noqa: E402
from autotune.specs.cluster import FIBRE_DELAY_S_PER_KM  # noqa: E402

BW_IN_Bps = 50e9          # a rank's in-building connection (400 Gb/s NIC)
LAT_IN_s = 5e-6
BW_X_Bps = 12.5e9         # its share of the oversubscribed cross-building uplink (1:4)
SWITCH_LAT_X_s = 10e-6


KINDS = ("allreduce", "allgather", "tree", "pat", "hierarchical", "p2p")


def draw(rng, i: int) -> dict:
    kinds = KINDS
    return {"kind": kinds[i % len(kinds)], "n_in": int(rng.choice([8, 32, 128])), "n_x": int(rng.choice([2, 4, 5])),
            "size_bytes": float(10 ** rng.uniform(6, 10)), "km": float(10 ** rng.uniform(0, 3)),
            "channels": int(rng.choice([1, 2, 4, 8, 16])), "proto": int(rng.choice([N.PROTO_SIMPLE, N.PROTO_LL128]))}


def one(case: dict) -> tuple[float, float]:
    """(simulated, closed form) seconds."""
    a_x = SWITCH_LAT_X_s + case["km"] * FIBRE_DELAY_S_PER_KM
    S, ch, p, n_in, n_x = case["size_bytes"], case["channels"], case["proto"], case["n_in"], case["n_x"]
    o = N.NET_STEP_OVERHEAD_s[p]
    base = N.RING_BASE_LATENCY_s[p]
    if case["kind"] == "p2p":
        o_p2p = N.NET_STEP_OVERHEAD_s[N.PROTO_SIMPLE] / N.RING_SLOTS_PER_STEP[N.PROTO_SIMPLE]
        sim = simulate_p2p(S, BW_X_Bps, a_x, o_p2p, N.p2p_channels(BW_IN_Bps))
        cf = float(p2p_time(S, BW_X_Bps, a_x, float(N.p2p_channels(BW_IN_Bps))))
        return sim, cf
    if case["kind"] == "hierarchical":
        sim = simulate_hierarchical_allreduce(S, n_in, n_x, BW_IN_Bps, LAT_IN_s, BW_X_Bps, a_x, o, o, p, ch,
                                              base_latency_s=base)
        inner = ring_time(KIND_AG, S, n_in, 1.0, BW_IN_Bps, LAT_IN_s, BW_IN_Bps, LAT_IN_s, p, ch, N.SIMPLE_BUFFER_BYTES_DEFAULT)
        across = ring_time(KIND_AR, S / n_in, 1.0, n_x, BW_X_Bps, a_x, BW_X_Bps, a_x, p, ch, N.SIMPLE_BUFFER_BYTES_DEFAULT)
        return sim, float(2 * inner + across)
    if case["kind"] == "pat":              # every rank crosses at once: its share of the uplink
        o_p = N.NET_STEP_OVERHEAD_s[N.PROTO_SIMPLE] / N.RING_SLOTS_PER_STEP[N.PROTO_SIMPLE]
        bw_x = BW_X_Bps / n_in
        sim = simulate_pat_allgather(S, n_in, n_x, BW_IN_Bps, LAT_IN_s, bw_x, a_x, o_p, ch,
                                     base_latency_s=N.PAT_BASE_LATENCY_s)
        cf, _ = pat_time(KIND_AG, S, n_in, n_x, BW_IN_Bps, LAT_IN_s, bw_x, a_x, ch, N.SIMPLE_BUFFER_BYTES_DEFAULT)
        return sim, float(cf)
    if case["kind"] == "tree":
        sim = simulate_tree_allreduce(S, n_in, n_x, BW_IN_Bps, LAT_IN_s, BW_X_Bps, a_x, o, o, p, ch,
                                      base_latency_s=N.TREE_BASE_LATENCY_s[p])
        cf = tree_allreduce_time(S, n_in, n_x, BW_IN_Bps, LAT_IN_s, BW_X_Bps, a_x, p, ch, N.SIMPLE_BUFFER_BYTES_DEFAULT)
        return sim, float(cf)
    hops = RingHops.two_tier(n_in, n_x, BW_IN_Bps, LAT_IN_s, BW_X_Bps, a_x, o, o)
    sim = simulate_ring(case["kind"], S, hops, p, ch, base_latency_s=base)
    kind = KIND_AR if case["kind"] == "allreduce" else KIND_AG
    cf = ring_time(kind, S, n_in, n_x, BW_IN_Bps, LAT_IN_s, BW_X_Bps, a_x, p, ch, N.SIMPLE_BUFFER_BYTES_DEFAULT)
    return sim, float(cf)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write every case as JSON")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    rows = []
    t0 = time.perf_counter()
    for i in range(a.cases):
        c = draw(rng, i)
        sim, cf = one(c)
        rows.append(c | {"simulated_s": sim, "closed_form_s": cf, "error": cf / sim - 1.0})
    err = np.array([abs(r["error"]) for r in rows])
    print(f"{len(rows)} cases in {time.perf_counter() - t0:.0f} s (seed {a.seed})")
    print(f"{'kind':14s} {'cases':>5s} {'median |err|':>13s} {'p90':>7s} {'max':>7s}")
    for kind in KINDS:
        e = np.array([abs(r["error"]) for r in rows if r["kind"] == kind])
        print(f"{kind:14s} {len(e):5d} {np.median(e):13.2%} {np.percentile(e, 90):7.2%} {e.max():7.2%}")
    print(f"{'all':14s} {len(err):5d} {np.median(err):13.2%} {np.percentile(err, 90):7.2%} {err.max():7.2%}")
    print("worst cases:")
    for r in sorted(rows, key=lambda r: -abs(r["error"]))[:5]:
        print(f"  {r['kind']:12s} n_in={r['n_in']:3d} n_x={r['n_x']} S={r['size_bytes']:.3g} B {r['km']:.0f} km "
              f"ch={r['channels']:2d} proto={'simple' if r['proto'] == N.PROTO_SIMPLE else 'll128'}: "
              f"sim {r['simulated_s'] * 1e3:.3f} ms, closed form {r['closed_form_s'] * 1e3:.3f} ms ({r['error']:+.1%})")
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
