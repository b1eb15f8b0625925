"""Data-parallel pieces of the reference workload (``train.py``): gradient buffers, the sliced
ring all-gather and reduce-scatter on gloo, and the two optimizers (ZeRO-1 sharded AdamW and
all-reduced AdamW)."""
from __future__ import annotations

import torch
import torch.distributed as dist


# ---------------------------------------------------------------- data-parallel optimizers
def _flat(tensors, pad: int) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors] + [torch.zeros(pad)])


def _views(flat: torch.Tensor, like) -> list:
    """Consecutive views of ``flat`` shaped like the tensors of ``like`` (the inverse of _flat)."""
    out, offset = [], 0
    for t in like:
        out.append(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()
    return out


SLICE_BYTES = 128 * 1024
"""Each ring step moves its chunk in slices of this size, as NCCL pipelines a ring step in slices
(NCCL_BUFFSIZE / NCCL_STEPS). Measured on the shaped two-building link (2 ranks, 4.2 MB each way):
one whole-buffer gloo message per step took 1.0x-2.1x the link time at random, in steps of one
200-250 ms stall; 128 KiB slices took 1.05x-1.27x, as gloo's own all-reduce does, and no longer
unshaped (experiments/collective_slices.py)."""


def _ring_exchange(send: torch.Tensor, recv: torch.Tensor, nxt: int, prv: int, group) -> None:
    """One ring step: ``send`` to the successor while ``recv`` fills from the predecessor, both in
    SLICE_BYTES slices posted at once (full duplex, no stall waiting for a whole buffer)."""
    step = max(1, SLICE_BYTES // send.element_size())
    send, recv = send.reshape(-1), recv.reshape(-1)
    ops = []
    for a in range(0, send.numel(), step):
        ops += [dist.P2POp(dist.isend, send[a:a + step], nxt, group), dist.P2POp(dist.irecv, recv[a:a + step], prv, group)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()


def _ring_neighbours(group):
    n, r = dist.get_world_size(group), dist.get_rank(group)
    return n, r, dist.get_global_rank(group, (r + 1) % n), dist.get_global_rank(group, (r - 1) % n)


def ring_reduce_scatter(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    """Sum-reduce-scatter as NCCL's ring does it: n-1 steps, each rank passing one 1/n chunk to its
    successor, so each rank sends (n-1)/n of the buffer. Gloo's own reduce_scatter is an all-reduce
    underneath (measured: twice those bytes), which would misrepresent ZeRO-1 and FSDP."""
    n, r, nxt, prv = _ring_neighbours(group)
    chunks = inp.reshape(n, -1)
    acc = chunks[(r - 1) % n].clone()
    for s in range(n - 1):
        got = torch.empty_like(acc)
        _ring_exchange(acc, got, nxt, prv, group)
        acc = got.add_(chunks[(r - s - 2) % n])
    out.copy_(acc.reshape(out.shape))


def ring_all_gather(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    """All-gather as NCCL's ring does it: n-1 steps, each rank forwarding the chunk it received last
    step, so each rank sends (n-1)/n of the output; sliced like ring_reduce_scatter (gloo's own
    all_gather_into_tensor measured 1.1x-1.8x the link time on the shaped link)."""
    n, r, nxt, prv = _ring_neighbours(group)
    chunks = out.reshape(n, -1)
    chunks[r].copy_(inp.reshape(-1))
    for s in range(n - 1):
        _ring_exchange(chunks[(r - s) % n], chunks[(r - s - 1) % n], nxt, prv, group)


def _ring_comms():
    """FSDP2's pluggable collectives (FSDPModule.set_custom_all_gather / set_custom_reduce_scatter)
    as the rings above. Both return None: synchronous, as FSDP2's own gathers are on CPU
    (unshard_async_op is False)."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter

    class RingAllGather(DefaultAllGather):
        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            ring_all_gather(output_tensor, input_tensor, group)
            return None

    class RingReduceScatter(DefaultReduceScatter):
        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, None):
                raise RuntimeError(f"ring reduce-scatter supports SUM and AVG only, got {op}")
            ring_reduce_scatter(output_tensor, input_tensor, group)
            if op == dist.ReduceOp.AVG:
                output_tensor.div_(dist.get_world_size(group))
            return None
    return RingAllGather(), RingReduceScatter()


def _grad_buffer(params, pad: int) -> torch.Tensor:
    """One flat, zeroed gradient buffer whose views become the parameters' ``.grad``: autograd then
    accumulates every micro-batch into it in place (Megatron's grad buffer; PyTorch DDP's
    gradient_as_bucket_view), so no gradient is ever copied to be reduced."""
    flat = torch.zeros(sum(p.numel() for p in params) + pad)
    for p, g in zip(params, _views(flat, params)):
        p.grad = g
    return flat


class ShardedAdamW:
    """ZeRO-1 as Megatron's distributed optimizer does it: the parameters and the gradients live
    in one flat buffer each; the gradient buffer is reduce-scattered once per step, AdamW updates
    this rank's shard of the flat parameters in place (in fp32 the shard is the parameters
    themselves: no master copy, as Megatron's fp32 parameters are their own main parameters), and
    the updated shards are all-gathered back into the parameter buffer."""

    def __init__(self, params, group, lr: float):
        self.params, self.group = list(params), group
        self.n, r = dist.get_world_size(group), dist.get_rank(group)
        numel = sum(p.numel() for p in self.params)
        self.pad = (-numel) % self.n
        self.shard = (numel + self.pad) // self.n
        self.flat_p = _flat([p.detach() for p in self.params], self.pad)
        with torch.no_grad():
            for p, v in zip(self.params, _views(self.flat_p, self.params)):
                p.data = v
        self.flat_g = _grad_buffer(self.params, self.pad)
        self.master = torch.nn.Parameter(self.flat_p[r * self.shard:(r + 1) * self.shard])   # a view
        self.opt = torch.optim.AdamW([self.master], lr=lr)

    def zero_grad(self, set_to_none: bool = True):
        self.flat_g.zero_()             # the gradients stay views of the buffer

    @torch.no_grad()
    def step(self):
        g = torch.empty(self.shard)
        ring_reduce_scatter(g, self.flat_g, self.group)
        self.master.grad = g.div_(self.n)
        self.opt.step()
        self.master.grad = None
        ring_all_gather(self.flat_p, self.master.detach(), self.group)


class AllReducedAdamW(torch.optim.AdamW):
    """DDP's gradient all-reduce done once after the step's backward passes (overlap_dp=0), in place
    on the flat gradient buffer. Used for DDP under every pipeline schedule: DDP's reducer under
    torch.distributed.pipelining synchronised a third to a half of the gradient bytes (interleaved,
    zero-bubble; measured on the uplink counters) or failed an internal assert (two micro-batches),
    torch 2.13."""

    def __init__(self, params, group, lr: float):
        params = list(params)
        super().__init__(params, lr=lr)
        self._group = group
        self._flat_g = _grad_buffer(params, 0)

    def zero_grad(self, set_to_none: bool = True):
        self._flat_g.zero_()

    @torch.no_grad()
    def step(self, closure=None):
        dist.all_reduce(self._flat_g, group=self._group)
        self._flat_g.div_(dist.get_world_size(self._group))
        return super().step(closure)
