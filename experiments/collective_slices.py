"""Why the reference workload slices its ring steps: one ring step between two emulated buildings
(a full-duplex exchange of the same buffer size each way over the shaped link), posted as one
whole-buffer gloo message against 128 KiB slices (autotune.workloads.dp.SLICE_BYTES), and
gloo's own all-reduce for scale. Prints each time as a multiple of the link time.

    python experiments/collective_slices.py                 # 50 and 200 Mbit/s, 4.2 MB each way
    python experiments/collective_slices.py --mbit 50 --repeats 8

Needs root (network namespaces and tc), like ``--backend local-torch`` with emulation.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

NUMEL_DEFAULT = 2_100_000            # fp32 elements: 8.4 MB buffer, 4.2 MB each way per exchange


def rank_main(numel: int, repeats: int, idle_s: float) -> None:
    """One rank (run inside its building's namespace): times each way of moving the half-buffer."""
    import torch
    import torch.distributed as dist

    from autotune.workloads.dp import SLICE_BYTES
    dist.init_process_group("gloo")
    r = dist.get_rank()
    x = torch.ones(numel)
    half = numel // 2

    def exchange(slice_numel):
        send, recv = x[:half], torch.empty(half)
        ops = []
        for a in range(0, half, slice_numel):
            ops += [dist.P2POp(dist.isend, send[a:a + slice_numel], 1 - r),
                    dist.P2POp(dist.irecv, recv[a:a + slice_numel], 1 - r)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()

    ways = {"whole-buffer exchange": lambda: exchange(half),
            "sliced exchange": lambda: exchange(SLICE_BYTES // 4),
            "gloo all_reduce (twice the bytes)": lambda: dist.all_reduce(x)}
    out = {}
    for name, fn in ways.items():
        times = []
        for _ in range(repeats):
            dist.barrier()
            time.sleep(idle_s)               # the link idles between steps, as during compute
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = times
    if r == 0:
        print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mbit", default="50,200", help="shaped cross-building rates, Mbit/s")
    ap.add_argument("--numel", type=int, default=NUMEL_DEFAULT)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--idle-s", type=float, default=0.3)
    ap.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_main:
        return rank_main(args.numel, args.repeats, args.idle_s)
    from autotune.workloads.launch import _free_port
    from autotune.workloads.netns import EmulatedBuildings, NamespaceUnavailable
    for rate in [float(v) for v in args.mbit.split(",")]:
        link_s = (args.numel // 2) * 4 * 8 / (rate * 1e6)     # one way, at the shaped rate
        try:
            with EmulatedBuildings(2, rate) as eb:
                env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR=eb.addr[0], MASTER_PORT=str(_free_port()),
                           GLOO_SOCKET_IFNAME=eb.ifname, OMP_NUM_THREADS="1")
                cmd = [sys.executable, os.path.abspath(__file__), "--rank-main", "--numel", str(args.numel),
                       "--repeats", str(args.repeats), "--idle-s", str(args.idle_s)]
                procs = [subprocess.Popen(["ip", "netns", "exec", eb.netns[r], *cmd],
                                          env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True)
                         for r in range(2)]
                outs = [p.communicate(timeout=600)[0] for p in procs]
        except NamespaceUnavailable as e:
            sys.exit(f"collective_slices: {e}")
        res = json.loads(next(o for o in outs if o.strip()))
        print(f"{rate:g} Mbit/s, {args.numel // 2 * 4 / 1e6:.1f} MB each way, link time {link_s:.3f} s:")
        for name, times in res.items():
            scale = 2 * link_s if "all_reduce" in name else link_s
            print(f"  {name:34} " + " ".join(f"{t / scale:.2f}x" for t in times))


if __name__ == "__main__":
    main()
