"""The real reference workload: a small Llama-style transformer trained with torch.distributed
on CPU processes (gloo), honouring a configuration's DP flavour, PP schedule, micro-batching
and placement. One process per rank; ``autotune.workloads.launch`` starts them (inside a network
namespace per building when asked).

Run by the launcher as ``python -m autotune.workloads.train '<job JSON>'`` with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set. Rank 0 prints one JSON line: the median step time after
warm-up, every step's time, and the phase breakdown that is cheap to take (optimizer step).

Mesh and placement: ranks are numbered building-major (rank // (world / buildings) is the
building). ``dp_out`` lays the mesh out as (dp, pp), so consecutive ranks form one pipeline and
the buildings split the data-parallel dimension; ``pp_out`` lays it out as (pp, dp), so the
buildings split the pipeline stages.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .dp import AllReducedAdamW, ShardedAdamW, _ring_comms

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B",
             "zb1p": "ScheduleInterleavedZeroBubble", "zbv": "ScheduleZBVZeroBubble"}
LOOPED = ("interleaved_1f1b", "zb1p")          # several chunks per rank, looping
V_SHAPED = ("zbv",)                            # two chunks per rank, V placement
MAX_STEPS = 100                                # measured steps at most, whatever min_measure_s asks


# ---------------------------------------------------------------- model (Llama-style)
class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    """Pre-norm attention (causal SDPA) + SwiGLU MLP, as in Llama."""

    def __init__(self, d: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.w13 = nn.Linear(d, 2 * ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(a)
        g, u = self.w13(self.n2(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(g) * u)


class Chunk(nn.Module):
    """One pipeline chunk: the embedding if first, its blocks, the head if last."""

    def __init__(self, job: dict, layers: int, first: bool, last: bool):
        super().__init__()
        d, V = job["hidden"], job["vocab"]
        self.embed = nn.Embedding(V, d) if first else None
        self.blocks = nn.ModuleList(Block(d, job["heads"], job["ffn"]) for _ in range(layers))
        self.norm = RMSNorm(d) if last else None
        self.head = nn.Linear(d, V, bias=False) if last else None

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def stage_indices(pp: int, v: int, sched: str, p: int) -> list[int]:
    if sched in V_SHAPED:
        return [p, 2 * pp - 1 - p]                 # down the V, then back up
    return [p + k * pp for k in range(v)]          # looping


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


# ---------------------------------------------------------------- one rank
def main(job: dict) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if job.get("crash_rank") == rank:          # fault injection for the tests
        raise RuntimeError(f"injected failure on rank {rank}")
    torch.manual_seed(1234)
    torch.set_num_threads(max(1, int(job.get("threads_per_rank", 1))))
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=job.get("pg_timeout_s", 120)))
    from .memprobe import PeakMemory
    probe = PeakMemory() if job.get("measure_memory") else None     # before any tensor of the rank exists
    pp, dp = job["pp"], job["dp"]
    from torch.distributed.device_mesh import init_device_mesh
    if job["placement"] == "pp_out":
        mesh = init_device_mesh("cpu", (pp, dp), mesh_dim_names=("pp", "dp"))
    else:
        mesh = init_device_mesh("cpu", (dp, pp), mesh_dim_names=("dp", "pp"))
    p = mesh.get_local_rank("pp")
    sched = job["pp_schedule"] if pp > 1 else "none"
    v = job.get("pp_chunks", 1) if sched in LOOPED else (2 if sched in V_SHAPED else 1)
    n_stages = pp * v
    L = job["layers"]
    per = L // n_stages
    stages_here = stage_indices(pp, v, sched, p) if pp > 1 else [0]
    modules = [Chunk(job, per, s == 0, s == n_stages - 1) for s in stages_here]

    flavour = job["dp_flavour"] if dp > 1 else "none"
    # DDP's reducer overlaps the all-reduce with backward; without a pipeline only (launch.check_job
    # refuses overlap_dp=1 elsewhere), else AllReducedAdamW all-reduces after the step
    use_ddp = flavour == "ddp" and pp == 1 and bool(job.get("overlap_dp", 1))
    params = [q for m in modules for q in m.parameters()]
    if flavour in ("fsdp", "hsdp"):
        from torch.distributed.fsdp import fully_shard
        if flavour == "hsdp":
            B = job["buildings"] if job["placement"] == "dp_out" else 1
            rep = B if dp % B == 0 and B > 1 else 1
            dmesh = init_device_mesh("cpu", (rep, dp // rep), mesh_dim_names=("replicate", "shard")) \
                if world == dp else _sub_hsdp_mesh(mesh, rep)
        else:
            dmesh = mesh["dp"]
        gather, scatter = _ring_comms()
        for m in modules:
            for unit in [*m.blocks, m]:
                fully_shard(unit, mesh=dmesh)
                unit.set_custom_all_gather(gather)
                unit.set_custom_reduce_scatter(scatter)
        params = [q for m in modules for q in m.parameters()]
    elif use_ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        modules = [DDP(m, process_group=mesh["dp"].get_group(), gradient_as_bucket_view=True) for m in modules]
        params = [q for m in modules for q in m.parameters()]
    if flavour == "zero1":
        opt = ShardedAdamW(params, mesh["dp"].get_group(), lr=1e-4)
    elif flavour == "ddp" and not use_ddp:          # the DDP reducer already all-reduces
        opt = AllReducedAdamW(params, mesh["dp"].get_group(), lr=1e-4)
    else:
        opt = torch.optim.AdamW(params, lr=1e-4)

    mb, seq = job["micro_batch"], job["seq_len"]
    n_mb = job["global_batch"] // (dp * mb)
    local_batch = n_mb * mb
    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, job["vocab"], (local_batch, seq), generator=g)
    target = torch.randint(0, job["vocab"], (local_batch, seq), generator=g)

    schedule = None
    if pp > 1:
        import torch.distributed.pipelining as pl
        pg = mesh["pp"].get_group()
        stages = [pl.PipelineStage(m, s, n_stages, torch.device("cpu"), group=pg) for m, s in zip(modules, stages_here)]
        cls = getattr(pl, SCHEDULES[sched])
        schedule = cls(stages if (v > 1 or sched in V_SHAPED or sched == "zb1p") else stages[0], n_microbatches=n_mb,
                       loss_fn=loss_fn)

    first, last = 0 in stages_here, (n_stages - 1) in stages_here

    def step():
        # DDP's gradients stay views of its buckets (gradient_as_bucket_view): set to None, the
        # no_sync micro-batches would accumulate fresh gradients, copied into the buckets at the last
        opt.zero_grad(set_to_none=not use_ddp)
        if schedule is not None:
            # the last stage's outputs (the logits of every micro-batch) are not kept to be returned:
            # torchtitan steps its schedule the same way
            kw = {"return_outputs": False, **({"target": target} if last else {})}
            if first:
                schedule.step(tokens, **kw)
            else:
                schedule.step(**kw)
        else:
            # gradient accumulation as torch.distributed.pipelining does it, so that pp=1 and pp>1
            # agree: DP gradients synchronised once per step, on the last micro-batch (DDP no_sync;
            # FSDP2 keeps parameters unsharded after backward and reduce-scatters on the last one,
            # i.e. workload.fsdp_regather=forward)
            m0 = modules[0]
            for i in range(n_mb):
                sl = slice(i * mb, (i + 1) * mb)
                last_mb = i == n_mb - 1
                if hasattr(m0, "set_requires_gradient_sync"):
                    m0.set_requires_gradient_sync(last_mb)
                    m0.set_reshard_after_backward(last_mb)
                ctx = m0.no_sync() if hasattr(m0, "no_sync") and not last_mb else contextlib.nullcontext()
                with ctx:
                    loss = loss_fn(m0(tokens[sl]), target[sl]) / n_mb     # the logits are freed before
                    loss.backward()                                         # the backward, as in torchtitan
        t_opt = time.perf_counter()
        opt.step()
        return time.perf_counter() - t_opt

    uplink = _uplink_counter(rank, world, job["buildings"])

    def timed_step():
        dist.barrier()
        t0, b0 = time.perf_counter(), uplink()
        t_opt = step()
        t1 = time.perf_counter()
        dist.barrier()              # every rank of the building has sent its share of the step
        return t1 - t0, t_opt, uplink() - b0

    warm = [timed_step()[0] for _ in range(job["warmup"])]
    # short steps are noisy: measure at least min_measure_s in all (every rank takes the same count)
    n_steps = job["steps"]
    if warm and job.get("min_measure_s", 0) > 0:
        n_steps = max(n_steps, math.ceil(job["min_measure_s"] / statistics.median(warm)))
        agreed = torch.tensor([min(n_steps, MAX_STEPS)], dtype=torch.int64)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        n_steps = int(agreed)
    times, opt_times, xb_bytes = [], [], []
    with probe.window() if probe else contextlib.nullcontext():
        for _ in range(n_steps):
            t, t_opt, xb_step = timed_step()
            times.append(t)
            opt_times.append(t_opt)
            xb_bytes.append(xb_step)
    peaks = None
    if probe:                       # every rank's peak, in rank order
        mine = probe.stop()
        peaks = torch.zeros(2 * world, dtype=torch.float64)
        peaks[2 * rank], peaks[2 * rank + 1] = mine["peak_bytes"], mine["between_steps_bytes"]
        dist.all_reduce(peaks, op=dist.ReduceOp.SUM)
    # every rank's median: the step is as slow as the slowest rank; bytes: summed over buildings
    t_max = torch.tensor([statistics.median(times)], dtype=torch.float64)
    xb = torch.tensor([float(statistics.median(xb_bytes))], dtype=torch.float64)
    dist.all_reduce(t_max, op=dist.ReduceOp.MAX)
    dist.all_reduce(xb, op=dist.ReduceOp.SUM)
    if rank == 0:
        out = {"iteration_time_s": float(t_max), "step_times_s": times,
               "breakdown": {"optimizer_s": statistics.median(opt_times)}, "world": world, "microbatches": n_mb}
        if peaks is not None:
            out["peak_memory_bytes_by_rank"] = peaks[0::2].tolist()
            out["between_steps_memory_bytes_by_rank"] = peaks[1::2].tolist()
        if os.environ.get("GLOO_SOCKET_IFNAME"):
            out["xb_bytes_per_step"] = float(xb)
        print(json.dumps(out), flush=True)
    # Teardown: gloo's process groups under FSDP2 aborted at destruction in about half of the runs
    # ("terminate called without an active exception": a joinable C++ thread destroyed), after the
    # measurement was complete and printed (8 runs of dp=2 FSDP: 4 aborts). Every rank waits for
    # the others here, then leaves without running the C++ destructors; the launcher reaps it.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _uplink_counter(rank: int, world: int, buildings: int):
    """Bytes sent so far on this building's uplink (the veth that leaves its network namespace).

    Only the first rank of each building reads it (the counter is per building); others read 0.
    Without emulation there is no uplink and every read is 0."""
    ifname = os.environ.get("GLOO_SOCKET_IFNAME")
    if not ifname or rank % max(1, world // max(1, buildings)):
        return lambda: 0
    path = f"/sys/class/net/{ifname}/statistics/tx_bytes"

    def read() -> int:
        with open(path) as fh:
            return int(fh.read())
    return read


def _sub_hsdp_mesh(mesh, rep: int):
    """(replicate, shard) view of the dp dimension when a pipeline dimension exists too."""
    dp_mesh = mesh["dp"]
    ranks = dp_mesh.mesh.flatten().tolist()
    from torch.distributed.device_mesh import DeviceMesh
    return DeviceMesh("cpu", torch.tensor(ranks).view(rep, -1), mesh_dim_names=("replicate", "shard"))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
    sys.exit(0)
