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

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B",
             "zb1p": "ScheduleInterleavedZeroBubble", "zbv": "ScheduleZBVZeroBubble"}
LOOPED = ("interleaved_1f1b", "zb1p")          # several chunks per rank, looping
V_SHAPED = ("zbv",)                            # two chunks per rank, V placement


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
        for m in modules:
            for b in m.blocks:
                fully_shard(b, mesh=dmesh)
            fully_shard(m, mesh=dmesh)
        params = [q for m in modules for q in m.parameters()]
    elif flavour == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        modules = [DDP(m, process_group=mesh["dp"].get_group()) for m in modules]
        params = [q for m in modules for q in m.parameters()]
    if flavour == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=1e-4,
                                      process_group=mesh["dp"].get_group())
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
        opt.zero_grad(set_to_none=True)
        if schedule is not None:
            kw = {"target": target} if last else {}
            if first:
                schedule.step(tokens, **kw)
            else:
                schedule.step(**kw)
        else:
            # gradient accumulation as production trainers do it: DP gradients are synchronised
            # once per step, on the last micro-batch (DDP no_sync / FSDP2 requires_gradient_sync)
            m0 = modules[0]
            for i in range(n_mb):
                sl = slice(i * mb, (i + 1) * mb)
                last_mb = i == n_mb - 1
                if hasattr(m0, "set_requires_gradient_sync"):
                    m0.set_requires_gradient_sync(last_mb)
                ctx = m0.no_sync() if hasattr(m0, "no_sync") and not last_mb else __import__("contextlib").nullcontext()
                with ctx:
                    out = m0(tokens[sl])
                    (loss_fn(out, target[sl]) / n_mb).backward()
        t_opt = time.perf_counter()
        opt.step()
        return time.perf_counter() - t_opt

    times, opt_times = [], []
    for i in range(job["warmup"] + job["steps"]):
        dist.barrier()
        t0 = time.perf_counter()
        t_opt = step()
        dist.barrier()
        if i >= job["warmup"]:
            times.append(time.perf_counter() - t0)
            opt_times.append(t_opt)
    # every rank's median: the step is as slow as the slowest rank
    med = torch.tensor([statistics.median(times)])
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"iteration_time_s": float(med.item()), "step_times_s": times,
                          "breakdown": {"optimizer_s": statistics.median(opt_times)},
                          "world": world, "microbatches": n_mb}), flush=True)
    dist.destroy_process_group()


def _sub_hsdp_mesh(mesh, rep: int):
    """(replicate, shard) view of the dp dimension when a pipeline dimension exists too."""
    dp_mesh = mesh["dp"]
    ranks = dp_mesh.mesh.flatten().tolist()
    from torch.distributed.device_mesh import DeviceMesh
    return DeviceMesh("cpu", torch.tensor(ranks).view(rep, -1), mesh_dim_names=("replicate", "shard"))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
    sys.exit(0)
