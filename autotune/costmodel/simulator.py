"""Event-level pipeline simulator: per micro-batch F, B, W operations on each rank with P2P
delays per boundary. Slower than the closed forms; used for fidelity on chosen configurations
and to check the closed forms (they must agree exactly on uniform stages without communication).

Ranks execute one operation at a time. F(i, c) needs F(i, c-1) (+ the boundary delay when c-1
lives on another rank); B(i, c) needs B(i, c+1) (+ delay) and F(i, c); W(i, c) needs B(i, c).
Schedules without a B/W split run B and W as one backward operation.

- gpipe, 1f1b, interleaved_1f1b: each rank follows the fixed order of its schedule
  (Megatron-LM's interleaved order: warm-up (p - r - 1) * 2 + (v - 1) * p, then one F one B).
- zb1p, zb2p, zbv, dualpipev: greedy zero-bubble policy (Qi et al. 2024): a free rank runs a
  ready B first, else a ready F while its in-flight count is under the schedule's memory cap,
  else a deferred W. zbv/dualpipev place 2 chunks per rank in a V (rank r holds chunks r and
  2p - 1 - r); DualPipeV's F/B overlap is not simulated (its closed form credits it).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from .stragglers import straggler_scale

F, B, W = 0, 1, 2
FIXED = ("gpipe", "1f1b", "interleaved_1f1b")


@dataclass
class PipelineResult:
    makespan_s: float
    busy_s: list          # compute time per rank
    n_ops: int
    span_s: list          # per rank, its last op's end less its first op's start

    @property
    def unsynchronised_s(self) -> float:
        """The step's period when no stage waits for the others at the step (optimizer
        post-validation): each rank starts its next step as soon as it is free, so the period is
        the longest single-rank span, not the makespan from a common start."""
        return max(self.span_s)


def chunk_rank(c: int, p: int, v_shape: bool) -> int:
    if v_shape:
        return c if c < p else 2 * p - 1 - c
    return c % p


def _fixed_order(sched: str, p: int, v: int, m: int, r: int) -> list[tuple[int, int, int]]:
    """(kind, micro-batch, global chunk) in the order rank r runs them."""
    if sched == "gpipe":
        return [(F, i, r) for i in range(m)] + [(B, i, r) for i in range(m)]
    if sched == "1f1b":
        w = min(p - r - 1, m)
        order = [(F, i, r) for i in range(w)]
        for i in range(m - w):
            order += [(F, w + i, r), (B, i, r)]
        order += [(B, i, r) for i in range(m - w, m)]
        return order
    # interleaved 1F1B (Megatron-LM schedules.py, forward_backward_pipelining_with_interleaving)
    total = m * v
    warm = min((p - r - 1) * 2 + (v - 1) * p, total)

    def fwd(k):
        chunk = (k // p) % v
        return (F, (k // (p * v)) * p + k % p, chunk * p + r)

    def bwd(k):
        chunk = v - 1 - (k // p) % v
        return (B, (k // (p * v)) * p + k % p, chunk * p + r)
    order = [fwd(k) for k in range(warm)]
    for j in range(total - warm):
        order += [fwd(warm + j), bwd(j)]
    order += [bwd(j) for j in range(total - warm, total)]
    return order


def simulate_pipeline(sched: str, p: int, v: int, m: int, t_f, t_b, t_w, delay, trace: list | None = None) \
        -> PipelineResult:
    """Makespan of one step's pipeline.

    ``t_f[c], t_b[c], t_w[c]``: durations of each op on global chunk c (0..n_chunks-1);
    ``delay(c_from, c_to)``: P2P time between consecutive chunks (0 on the same rank).
    ``trace``: when given, every op run is appended as (rank, kind, micro-batch, chunk, start_s,
    end_s, ready_s), kind "F", "B" (B+W when the schedule does not split them) or "W".
    """
    v_shape = sched in ("zbv", "dualpipev")
    n_chunks = 2 * p if v_shape else p * v
    split_w = sched not in FIXED
    rank_of = [chunk_rank(c, p, v_shape) for c in range(n_chunks)]
    dur = {F: t_f, B: [t_b[c] + (0.0 if split_w else t_w[c]) for c in range(n_chunks)], W: t_w}
    done: dict[tuple[int, int, int], float] = {}

    def ready_time(op):
        kind, i, c = op
        if kind == F:
            if c == 0:
                return 0.0
            prev = (F, i, c - 1)
            return done[prev] + delay(c - 1, c) if prev in done else None
        if kind == B:
            own = done.get((F, i, c))
            if own is None:
                return None
            if c == n_chunks - 1:
                return own
            nxt = (B, i, c + 1)
            return max(own, done[nxt] + delay(c + 1, c)) if nxt in done else None
        return done.get((B, i, c))

    chunks_of = [[c for c in range(n_chunks) if rank_of[c] == r] for r in range(p)]
    if split_w:
        # memory cap: micro-batches admitted on a rank (F of its first chunk) and not yet through
        # that chunk's B: 1F1B's p - r for zb1p, twice that for zb2p, p for the V schedules
        first_chunk = [min(ch) for ch in chunks_of]
        limit = [(2 * (p - r) if sched == "zb2p" else p if v_shape else p - r) for r in range(p)]
        pending = [[(F, i, c) for i in range(m) for c in chunks_of[r]] for r in range(p)]
        for r in range(p):
            pending[r] += [(B, i, c) for i in range(m) for c in chunks_of[r]]
            pending[r] += [(W, i, c) for i in range(m) for c in chunks_of[r]]
        inflight = [0] * p
    else:
        orders = [_fixed_order(sched, p, v, m, r) for r in range(p)]
        pos = [0] * p
    total_ops = sum(len(x) for x in (pending if split_w else orders))
    free = [0.0] * p
    busy = [0.0] * p
    first = [None] * p
    seq = p
    heap = [(0.0, r, r) for r in range(p)]
    finish_times: list[float] = []    # min-heaps of future moments: the clock only moves forward, so a
    # moment at or before the current one is dropped for good (each wait is O(log n), not O(ops))
    scheduled = 0
    idle_pops = 0
    waited_for: list[float] = []      # ready times any waiting rank is waiting for (a message in flight)

    def wait(r, t, own_ready):
        """Re-queue rank r at the next moment anything can change: an op finishing later, another
        rank's turn (same time, after it), or a candidate of any waiting rank becoming ready."""
        nonlocal seq, idle_pops
        others_now = any(x[0] <= t + 1e-15 for x in heap)
        for x in own_ready:
            if x > t + 1e-15:
                heapq.heappush(waited_for, x)
        for h in (finish_times, waited_for):
            while h and h[0] <= t + 1e-15:
                heapq.heappop(h)
        later = [h[0] for h in (finish_times, waited_for) if h] + [x[0] for x in heap if x[0] > t + 1e-15]
        if others_now:
            idle_pops += 1
            if idle_pops > 2 * p + 2 and not later:
                raise RuntimeError(f"pipeline simulation of {sched} deadlocked (no rank can proceed)")
            nxt = t
        elif later:
            idle_pops = 0
            nxt = min(later)
        else:
            raise RuntimeError(f"pipeline simulation of {sched} deadlocked on rank {r}")
        if idle_pops > 2 * p + 2:
            idle_pops = 0
            nxt = min(later)
        seq += 1
        heapq.heappush(heap, (nxt, seq, r))

    while scheduled < total_ops:
        t, _, r = heapq.heappop(heap)
        if split_w:
            if not pending[r]:
                continue
            choice, earliest = None, None
            cands = []
            for op in pending[r]:
                rt = ready_time(op)
                if rt is None:
                    continue
                cands.append((op, rt))
                earliest = rt if earliest is None else min(earliest, rt)
            ready_now = [(op, rt) for op, rt in cands if rt <= t + 1e-15]
            bs = [op for op, _ in ready_now if op[0] == B]
            fs = [op for op, _ in ready_now if op[0] == F]
            ws = [op for op, _ in ready_now if op[0] == W]
            if bs:
                choice = max(bs, key=lambda o: (o[2], -o[1]))
            elif fs:
                deeper = [o for o in fs if o[2] != first_chunk[r]]
                if deeper:
                    choice = min(deeper, key=lambda o: (o[1], -o[2]))
                elif inflight[r] < limit[r]:
                    choice = min(fs, key=lambda o: o[1])
            if choice is None and ws:
                choice = min(ws, key=lambda o: (o[1], o[2]))
            if choice is None:
                wait(r, t, [rt for _, rt in cands if rt > t + 1e-15])
                continue
            pending[r].remove(choice)
            if choice[2] == first_chunk[r] and choice[0] == F:
                inflight[r] += 1
            elif choice[2] == first_chunk[r] and choice[0] == B:  # W keeps only its small inputs
                inflight[r] -= 1
        else:
            if pos[r] >= len(orders[r]):
                continue
            choice = orders[r][pos[r]]
            rt = ready_time(choice)
            if rt is None or rt > t + 1e-15:
                wait(r, t, [rt] if rt is not None else [])
                continue
            pos[r] += 1
        d = dur[choice[0]][choice[2]]
        start = max(t, free[r])
        end = start + d
        done[choice] = end
        if trace is not None:
            trace.append((r, "FBW"[choice[0]], choice[1], choice[2], start, end, ready_time(choice)))
        free[r] = end
        busy[r] += d
        if first[r] is None:
            first[r] = start
        heapq.heappush(finish_times, end)
        scheduled += 1
        idle_pops = 0
        seq += 1
        heapq.heappush(heap, (end, seq, r))
    return PipelineResult(makespan_s=max(free), busy_s=busy, n_ops=total_ops,
                          span_s=[f - (s or 0.0) for f, s in zip(free, first)])


def simulate(scenario, config, params=None, trace: list | None = None) -> dict:
    """High-fidelity iteration time of one configuration: the cost model's stage and P2P times
    replayed through the event-level pipeline simulator (per-boundary in- vs cross-building
    delays), plus the same data-parallel exposure and optimizer step as the closed form."""
    from .iteration import iteration_formulas
    from ..configbatch import scalar_row
    from .params import default_params
    from .xp import SCALAR
    p_ = params or default_params()
    out = iteration_formulas(scenario, scalar_row(config), p_, SCALAR)
    p, m = config.pp, int(round(out["micro_batches"]))
    sched = config.pp_schedule if p > 1 else "1f1b"
    v = 2 if sched in ("zbv", "dualpipev") else config.pp_chunks
    n = p * v
    t_f, t_b, t_w = ([out[k] / v] * n for k in ("_pipe_t_f", "_pipe_t_b", "_pipe_t_w"))
    per_building = max(p // int(out["_b_pp"]), 1)
    v_shape = sched in ("zbv", "dualpipev")

    def delay(c_from: int, c_to: int) -> float:
        r1, r2 = chunk_rank(c_from, p, v_shape), chunk_rank(c_to, p, v_shape)
        if r1 == r2:
            return 0.0
        return out["_t_p2p_x"] if r1 // per_building != r2 // per_building else out["_t_p2p_in"]
    res = simulate_pipeline(sched, p, v, m, t_f, t_b, t_w, delay, trace)
    # optimizer post-validation: ZB-2p's stages no longer meet at the step (pipeline.bubble_time)
    unsync = scenario.workload.optimizer_post_validation and sched == "zb2p"
    pipe = res.unsynchronised_s if unsync else res.makespan_s
    # the step waits for its slowest rank, as the closed form (stragglers.py)
    base = pipe + out["_dp_exposed"] + out["_t_opt"]
    total = base * straggler_scale(scenario.n_gpus, p_.straggler_jitter)
    return {"iteration_time_s": total, "pipeline_s": pipe, "busy_s": res.busy_s,
            "schedule": sched, "pp": p, "chunks": v, "micro_batches": m, "ranks_per_building": per_building,
            "closed_form_iteration_time_s": float(out["iteration_time_s"]),
            "closed_form_pipeline_s": float(out["_T_pipe"]), "ops_simulated": res.n_ops}
