"""The configuration space of a scenario: every legal combination of degrees, placement,
schedule and transport, as arrays.

A ConfigBatch is a dict of equal-length numpy arrays, one per field of ``Config``; categorical
fields hold their index into the tuples of ``autotune.specs.config`` (their *code*). The legality
rules live here and only here (``violations``); enumeration and sampling produce legal rows only.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .configbatch import (ConfigBatch, _check_ranges, batch_from_configs, concat, config_at,  # noqa: F401 - public here
                          take)
from .errors import UserInputError
from .space_grid import (BYTES_PER_CORE_ROW, CHUNK_ROWS, MAX_LEGAL_CORE_BYTES, SPACE_PRESETS,  # noqa: F401 - public here
                         TRANSPORT, _divisors, mixed_speeds)
from .specs.codes import DPFlavour, HeteroSplit, LoadBalancing, Placement, PPSchedule, Protocol, Recompute
from .specs.config import CATEGORICAL, FIELDS, PP_SCHEDULES, Config
from .specs.scenario import Scenario

_SINGLE_CHUNK = (PPSchedule.GPIPE, PPSchedule.ONE_F_ONE_B, PPSchedule.ZB1P, PPSchedule.ZB2P)
_V_SHAPED = (PPSchedule.ZBV, PPSchedule.DUALPIPEV)


@dataclass(frozen=True)
class Rule:
    field: str
    allowed: str
    detail: object = None     # (batch, row) -> what the breaking row has, appended to ``allowed``


class SearchSpace:
    """Legal configurations of one scenario.

    Value lists per knob are options; the defaults are what ``autotune space`` counts.
    On a single building the cross-building transport knobs have one value (they do nothing).
    """

    def __init__(self, scenario: Scenario, *, cp_values=(1, 2, 4, 8), micro_batches=(1, 2, 4, 8),
                 chunks=(2, 3, 4, 6, 8), queue_pairs=(1, 2, 4, 8, 16), overlap=(1,),
                 schedules=PP_SCHEDULES, protocols=("auto", "ll128"), channels=(4, 16), buffers_mib=(4,),
                 buckets_mib=(0,), load_balancing=None, loss_recovery=None, collectives=None, hetero=None):
        self.scenario = scenario
        self.cp_values = tuple(cp_values)
        self.micro_batches = tuple(micro_batches)
        self.chunks = tuple(chunks)
        self.overlap = tuple(overlap)
        self.schedules = tuple(schedules)
        unknown = [s for s in self.schedules if s not in PP_SCHEDULES]
        if unknown:
            raise UserInputError("schedules", unknown[0], ", ".join(PP_SCHEDULES))
        multi = scenario.cluster.n_buildings > 1
        self.queue_pairs = tuple(queue_pairs) if multi else (1,)
        self.load_balancing = tuple(load_balancing or CATEGORICAL["xb_load_balancing"]) if multi else ("ecmp",)
        self.loss_recovery = tuple(loss_recovery or CATEGORICAL["xb_loss_recovery"]) if multi else ("gbn",)
        self.collectives = tuple(collectives or CATEGORICAL["collective"])
        for name, vals in (("load_balancing", self.load_balancing), ("loss_recovery", self.loss_recovery),
                           ("collectives", self.collectives)):
            allowed = CATEGORICAL[{"load_balancing": "xb_load_balancing", "loss_recovery": "xb_loss_recovery",
                                   "collectives": "collective"}[name]]
            bad = [v for v in vals if v not in allowed]
            if bad:
                raise UserInputError(name, bad[0], ", ".join(allowed))
        ll128 = all(b.gpu.nccl_ll128 for b in scenario.cluster.buildings) and (
            len({b.gpu.compute_capability for b in scenario.cluster.buildings}) == 1
            or min(b.gpu.compute_capability for b in scenario.cluster.buildings) >= 9.0)
        self.ll128 = ll128
        for name, vals in (("protocols", protocols), ("channels", channels), ("buffers_mib", buffers_mib),
                           ("buckets_mib", buckets_mib)):
            if not vals:
                raise UserInputError(name, vals, "at least one value")
        bad = [p for p in protocols if p not in Protocol.labels()]
        if bad:
            raise UserInputError("protocols", bad[0], ", ".join(Protocol.labels()))
        # where the transport does not cross buildings, its knobs take NCCL's defaults only
        self.protocols = tuple(p for p in protocols if ll128 or p != "ll128") if multi else ("auto",)
        self.channels = tuple(channels) if multi else (4,)
        self.buffers_mib = tuple(buffers_mib) if multi else (4,)
        self.buckets_mib = tuple(buckets_mib)
        m = scenario.model
        node = min(b.gpu.nvlink_domain_gpus for b in scenario.cluster.buildings)
        self.tp_values = tuple(d for d in _divisors(node))
        self.ep_values = tuple(_divisors(m.moe_experts)) if m.is_moe else (1,)
        self.pp_values = tuple(range(1, m.n_layers + 1))
        hetero = tuple(hetero or HeteroSplit.labels()) if mixed_speeds(scenario) else ("even",)
        bad = [h for h in hetero if h not in HeteroSplit.labels()]
        if bad or not hetero:
            raise UserInputError("hetero", bad[0] if bad else hetero, ", ".join(HeteroSplit.labels()))
        self.hetero_values = tuple(HeteroSplit.of(h) for h in hetero)

    # ---------------------------------------------------------------- legality
    def rules(self) -> dict[str, Rule]:
        s, m, c = self.scenario, self.scenario.model, self.scenario.cluster
        node = min(b.gpu.nvlink_domain_gpus for b in c.buildings)
        B = c.n_buildings
        return {
            "product": Rule("dp", f"tp*cp*pp*dp = {s.n_gpus} GPUs"),
            "tp": Rule("tp", f"a divisor of the NVLink domain ({node}) and of n_kv_heads ({m.n_kv_heads})"),
            "cp": Rule("cp", f"a divisor of seq_len/2 ({s.seq_len // 2})"),
            "ep": Rule("ep", "1 for a dense model; else a divisor of moe_experts "
                             f"({m.moe_experts}) with etp*ep dividing tp*cp*dp (etp 0: ep divides dp*cp)"),
            "etp": Rule("etp", "0 (the experts' TP is tp), or a divisor of tp on a mixture-of-experts model"),
            "pp": Rule("pp", f"pp * pp_chunks <= n_layers ({m.n_layers})"),
            "batch": Rule("micro_batch", f"dp * micro_batch must divide the global batch ({s.global_batch_seqs} sequences)"),
            "no_pp": Rule("pp_schedule", "1f1b with pp_chunks=1 when pp=1"),
            "chunks": Rule("pp_chunks", "1 for gpipe/1f1b/zb1p/zb2p, >=2 for interleaved_1f1b, 2 for zbv/dualpipev"),
            "microbatches": Rule("micro_batch", "at least pp micro-batches per step (a multiple of pp for interleaved_1f1b)",
                                 lambda b, i: f"; here {s.global_batch_seqs} sequences / (dp {b['dp'][i]} x micro_batch {b['micro_batch'][i]}) "
                                 f"= {s.global_batch_seqs // (b['dp'][i] * b['micro_batch'][i])} for pp {b['pp'][i]} (fewer GPUs or a "
                                 "larger --global-batch also fix it)"),
            "placement": Rule("placement", self._placement_text(B)),
            "flavour": Rule("dp_flavour", "ddp when dp*cp=1; hsdp only when the data-parallel group spans buildings"),
            "spray_qps": Rule("xb_queue_pairs", "1 with packet_spray (queue pairs do not apply)"),
            "ll128": Rule("nccl_protocol", "auto, simple or ll (NCCL runs LL128 only on NVLink nodes of one SM "
                                           "version or all >= 9.0; this cluster has none)" if not self.ll128
                          else "auto, simple, ll128 or ll"),
            "channels": Rule("nccl_channels", f"1..{64} (NCCL MAXCHANNELS)"),
            "hetero": Rule("hetero_split", "even, or by_speed with placement dp_out or pp_out on a cluster whose "
                                           "buildings differ in GPU speed" if mixed_speeds(s) else
                           "even (every building has the same GPU)"),
            "bucket": Rule("dp_bucket_mib", f"0 (the framework default) or at most the model's gradient bytes "
                                            f"({self._grad_mib()} MiB)"),
            "zero1_group": Rule("dp", f"dp*cp a multiple of workload.zero1_shard_ranks ({s.workload.zero1_shard_ranks}) "
                                      "under dp_flavour zero1 (InternEvo's optimizer shard groups)"),
        }

    def _grad_mib(self) -> int:
        """The whole model's gradients in MiB at 2 bytes per parameter (at least 1)."""
        return max(1, int(math.ceil(2 * self.scenario.model.total_params / 2**20)))

    @staticmethod
    def _placement_text(B: int) -> str:
        if B == 1:
            return "dp_out on a single building"
        return (f"dp_out (dp % {B} == 0), pp_out (pp % {B} == 0, equal buildings), hybrid (buildings "
                f"factor into pp x dp), ep_out (MoE, ep % {B} == 0), cp_out (cp % {B} == 0)")

    def violations(self, b: ConfigBatch) -> dict[str, np.ndarray]:
        """One boolean array per rule: True where a row breaks it. Vectorised."""
        s, m, c = self.scenario, self.scenario.model, self.scenario.cluster
        node = min(bd.gpu.nvlink_domain_gpus for bd in c.buildings)
        B = c.n_buildings
        uniform = c.uniform_buildings
        tp, cp, ep, pp, dp = (np.asarray(b[k], dtype=np.int64) for k in ("tp", "cp", "ep", "pp", "dp"))
        v, mb = np.asarray(b["pp_chunks"], dtype=np.int64), np.asarray(b["micro_batch"], dtype=np.int64)
        pl, fl, sc = (np.asarray(b[k]) for k in ("placement", "dp_flavour", "pp_schedule"))
        gb = s.global_batch_seqs
        out = {}
        out["product"] = tp * cp * pp * dp != s.n_gpus
        out["tp"] = (node % tp != 0) | (m.n_kv_heads % tp != 0)
        out["cp"] = (s.seq_len // 2) % cp != 0
        etp = np.asarray(b["etp"] if "etp" in b else np.zeros_like(tp), dtype=np.int64)
        et = np.where(etp > 0, etp, tp)
        out["ep"] = ((ep > 1) & (not m.is_moe)) | ((max(m.moe_experts, 1) % ep) != 0) | (((tp * dp * cp) % (et * ep)) != 0)
        out["etp"] = (etp > 0) & ((not m.is_moe) | (tp % np.maximum(etp, 1) != 0))
        out["pp"] = pp * v > m.n_layers
        local = dp * mb
        out["batch"] = (gb % np.maximum(local, 1)) != 0
        mcount = gb // np.maximum(local, 1)
        has_pp = pp > 1
        out["no_pp"] = (~has_pp) & ((sc != PPSchedule.ONE_F_ONE_B) | (v != 1))
        single = np.isin(sc, _SINGLE_CHUNK)
        vshape = np.isin(sc, _V_SHAPED)
        out["chunks"] = has_pp & ((single & (v != 1)) | (vshape & (v != 2)) | ((sc == PPSchedule.INTERLEAVED_1F1B) & (v < 2)))
        out["microbatches"] = has_pp & (sc != PPSchedule.GPIPE) & (
            (mcount < pp) | ((sc == PPSchedule.INTERLEAVED_1F1B) & (mcount % pp != 0)))
        # placement
        if B == 1:
            bad_pl = pl != Placement.DP_OUT
        else:
            mp = tp * cp * pp
            whole_replicas = np.ones_like(tp, dtype=bool) if uniform else np.all(
                [bd.gpus % mp == 0 for bd in c.buildings], axis=0)
            f_pp = self._hybrid_pp(B)
            ok = [      # in Placement's order: dp_out, pp_out, hybrid, ep_out, cp_out
                # the expert-DP group (tp*cp*dp / (etp*ep) members) must span the buildings too
                (dp % B == 0) & whole_replicas & ((((tp * dp * cp) // np.maximum(et * ep, 1)) % B == 0) | (ep == 1)),
                (pp % B == 0) & uniform,
                (f_pp > 0) & (pp % max(f_pp, 1) == 0) & (dp % max(B // max(f_pp, 1), 1) == 0) & uniform & (f_pp > 0),
                (ep % B == 0) & (ep > 1) & uniform,
                (cp % B == 0) & (cp > 1) & uniform,
            ]
            bad_pl = ~np.select([pl == p for p in Placement], ok, False)
        out["placement"] = bad_pl
        spans = (pl != Placement.PP_OUT) & (B > 1)
        if B > 1:
            spans = spans & ~((pl == Placement.HYBRID) & (self._hybrid_pp(B) == 0))
        out["flavour"] = ((dp * cp == 1) & (fl != DPFlavour.DDP)) | ((fl == DPFlavour.HSDP) & ~(spans & (dp * cp > B)))
        out["spray_qps"] = (np.asarray(b["xb_load_balancing"]) == LoadBalancing.PACKET_SPRAY) & \
            (np.asarray(b["xb_queue_pairs"]) != 1)
        out["ll128"] = (np.asarray(b["nccl_protocol"]) == Protocol.LL128) & (not self.ll128)
        chn = np.asarray(b["nccl_channels"], dtype=np.int64)
        out["channels"] = (chn < 1) | (chn > 64)
        out["bucket"] = np.asarray(b["dp_bucket_mib"], dtype=np.int64) > self._grad_mib()
        g = s.workload.zero1_shard_ranks if s.workload.zero1_param_sync == "broadcast" else 0
        out["zero1_group"] = (fl == DPFlavour.ZERO1) & (g > 0) & ((dp * cp) % max(g, 1) != 0)
        by_speed = np.asarray(b.get("hetero_split", HeteroSplit.EVEN)) == HeteroSplit.BY_SPEED   # absent: even
        out["hetero"] = by_speed & ((not mixed_speeds(s)) | ~np.isin(pl, (Placement.DP_OUT, Placement.PP_OUT)))
        return out

    @staticmethod
    def _hybrid_pp(B: int) -> int:
        for f in range(2, B):
            if B % f == 0:
                return f
        return 0

    def legal_mask(self, b: ConfigBatch) -> np.ndarray:
        bad = None
        for arr in self.violations(b).values():
            bad = arr if bad is None else (bad | arr)
        return ~bad

    def check(self, config: Config) -> None:
        """Raise a one-line UserInputError naming the first rule the configuration breaks."""
        self.check_batch(batch_from_configs([config]))

    def check_batch(self, b: ConfigBatch) -> None:
        """Raise a one-line UserInputError naming the first rule that some row breaks, the row
        (in a batch of several), its value and what is allowed."""
        rules = self.rules()
        n = len(b["tp"])
        _check_ranges(b, n)
        for name, bad in self.violations(b).items():
            rows = np.flatnonzero(bad)
            if len(rows):
                r, i = rules[name], int(rows[0])
                value = b[r.field][i]
                value = CATEGORICAL[r.field][int(value)] if r.field in CATEGORICAL else int(value)
                where = f" (row {i} of {n})" if n > 1 else ""
                raise UserInputError(f"config.{r.field}{where}", value, r.allowed + (r.detail(b, i) if r.detail else ""))

    # ---------------------------------------------------------------- enumeration
    @cached_property
    def degree_tuples(self) -> np.ndarray:
        """Legal (tp, cp, ep, pp, dp) rows: the product matches the GPU count, dp divides the batch."""
        s, m = self.scenario, self.scenario.model
        N, gb = s.n_gpus, s.global_batch_seqs
        rows = []
        for tp, cp, ep, pp in itertools.product(self.tp_values, self.cp_values, self.ep_values, self.pp_values):
            if N % (tp * cp * pp) or m.n_kv_heads % tp or (s.seq_len // 2) % cp:
                continue
            dp = N // (tp * cp * pp)
            if gb % dp or (dp * cp) % ep:
                continue
            rows.append((tp, cp, ep, pp, dp))
        return np.array(rows, dtype=np.int64).reshape(-1, 5)

    @cached_property
    def _core_grid(self) -> ConfigBatch:
        """Placement x flavour x (schedule, chunks) x micro-batch x recompute x overlap x hetero split."""
        sv = []
        for sname in self.schedules:
            code = PPSchedule.of(sname)
            if sname == "interleaved_1f1b":
                sv += [(code, c) for c in self.chunks]
            elif sname in ("zbv", "dualpipev"):
                sv.append((code, 2))
            else:
                sv.append((code, 1))
        grids = np.meshgrid(np.arange(len(Placement)), np.arange(len(DPFlavour)), np.arange(len(sv)),
                            np.array(self.micro_batches), np.arange(len(Recompute)), np.array(self.overlap),
                            np.array(self.hetero_values, dtype=np.int64), indexing="ij")
        flat = [g.ravel() for g in grids]
        sv = np.array(sv, dtype=np.int64)
        return {"placement": flat[0].astype(np.int8), "dp_flavour": flat[1].astype(np.int8),
                "pp_schedule": sv[flat[2], 0].astype(np.int8), "pp_chunks": sv[flat[2], 1],
                "micro_batch": flat[3].astype(np.int64), "recompute": flat[4].astype(np.int8),
                "overlap_dp": flat[5].astype(np.int64), "hetero_split": flat[6].astype(np.int8),
                "etp": np.zeros(len(flat[0]), dtype=np.int64)}      # experts' TP = tp (not searched)

    @cached_property
    def transport_grid(self) -> ConfigBatch:
        rows = []
        for lbi, lbn in enumerate(CATEGORICAL["xb_load_balancing"]):
            if lbn not in self.load_balancing:
                continue
            for q in (self.queue_pairs if lbn != "packet_spray" else (1,)):
                for lri, lrn in enumerate(CATEGORICAL["xb_loss_recovery"]):
                    if lrn not in self.loss_recovery:
                        continue
                    for ci in (CATEGORICAL["collective"].index(c) for c in self.collectives):
                        for pr in self.protocols:
                            for chn in self.channels:
                                for bf in self.buffers_mib:
                                    for bk in self.buckets_mib:
                                        rows.append((lbi, q, lri, ci, Protocol.of(pr), chn, bf, bk))
        a = np.array(rows, dtype=np.int64)
        out = {k: a[:, i] for i, k in enumerate(TRANSPORT)}
        for k in TRANSPORT:
            if k in CATEGORICAL:
                out[k] = out[k].astype(np.int8)
        return out

    @cached_property
    def legal_core(self) -> ConfigBatch:
        """Every legal row of degrees x core knobs, with transport at its first value. Built in
        chunks of CHUNK_ROWS candidate rows, so the peak memory is one chunk plus the legal rows
        (a scenario within the validators can ask for hundreds of millions of candidates); when the
        legal rows alone would pass MAX_LEGAL_CORE_BYTES, a one-line error says so before they do."""
        deg, core = self.degree_tuples, self._core_grid
        nd, nc = len(deg), len(core["placement"])
        if nd == 0:
            return {f: np.zeros(0, dtype=np.int64) for f in FIELDS}
        t = self.transport_grid
        per = max(1, CHUNK_ROWS // nc)
        parts, kept = [], 0
        for lo in range(0, nd, per):
            d = deg[lo:lo + per]
            n = len(d) * nc
            b = {name: np.repeat(d[:, i], nc) for i, name in enumerate(("tp", "cp", "ep", "pp", "dp"))}
            b.update({k: np.tile(arr, len(d)) for k, arr in core.items()})
            b.update({k: np.full(n, t[k][0], dtype=t[k].dtype) for k in t})
            part = take(b, self.legal_mask(b))
            kept += len(part["tp"])
            if kept * BYTES_PER_CORE_ROW > MAX_LEGAL_CORE_BYTES:
                s = self.scenario
                raise UserInputError("scenario", f"{s.model.name} on {s.cluster.name}, {s.n_gpus} GPUs",
                                     f"a space whose legal rows fit in {MAX_LEGAL_CORE_BYTES / 2**30:.3g} GiB (more "
                                     f"than {kept:,} legal core rows after {lo + len(d):,} of {nd:,} degree tuples): "
                                     "narrow it with --gpus, --global-batch or --seq-len")
            parts.append(part)
        return concat(parts)

    @property
    def n_transport(self) -> int:
        return len(self.transport_grid["collective"])

    def legal_count(self) -> int:
        return len(self.legal_core["tp"]) * self.n_transport

    def raw_size(self) -> int:
        """Size of the naive product of every knob's values (what a categorical encoding sees)."""
        n_sv = sum(len(self.chunks) if s == "interleaved_1f1b" else 1 for s in self.schedules)
        dims = [len(self.tp_values), len(self.cp_values), len(self.ep_values), len(self.pp_values),
                5, 4, n_sv, len(self.micro_batches), 3, len(self.overlap), len(self.hetero_values),
                len(self.load_balancing) * len(self.queue_pairs), len(self.loss_recovery), len(self.collectives),
                len(self.protocols), len(self.channels), len(self.buffers_mib), len(self.buckets_mib)]
        return math.prod(dims)

    def rows(self, idx) -> ConfigBatch:
        """Legal rows by global index in [0, legal_count): core index * n_transport + transport."""
        idx = np.asarray(idx, dtype=np.int64)
        ci, ti = np.divmod(idx, self.n_transport)
        out = take(self.legal_core, ci)
        t = self.transport_grid
        for k in t:
            out[k] = t[k][ti]
        return out

    def enumerate(self, chunk_rows: int = 1 << 18):
        """Yield the whole legal space in batches of about ``chunk_rows`` rows."""
        n = self.legal_count()
        for start in range(0, n, chunk_rows):
            yield self.rows(np.arange(start, min(n, start + chunk_rows)))

    def sample(self, n: int, seed=None) -> ConfigBatch:
        """``n`` legal configurations drawn uniformly (with replacement) from the legal space."""
        rng = np.random.default_rng(seed)
        total = self.legal_count()
        if total == 0:
            raise UserInputError("scenario", self.scenario.summary(), "a scenario with at least one legal configuration")
        return self.rows(rng.integers(0, total, size=n))

    def require_legal(self) -> "SearchSpace":
        """Self, or a one-line UserInputError saying why the scenario has no legal configuration
        and what to change."""
        if self.legal_count() > 0:
            return self
        s, m = self.scenario, self.scenario.model
        if len(self.degree_tuples) == 0:
            why = (f"no tp x cp x pp x dp equals its {s.n_gpus} GPUs with tp <= {max(self.tp_values)}, "
                   f"pp <= {m.n_layers} layers, cp among {self.cp_values} and dp dividing the global batch "
                   f"({s.global_batch_seqs} sequences): change --gpus or --global-batch")
        else:
            why = ("every combination of degrees breaks a placement, schedule or micro-batch rule "
                   "(`autotune space --json` lists the rules): change --gpus, --global-batch or the cluster")
        raise UserInputError("scenario", f"{m.name} on {s.cluster.name}, {s.n_gpus} GPUs",
                             f"a scenario with at least one legal configuration; {why}")

    def summary(self) -> dict:
        legal = self.legal_count()
        raw = self.raw_size()
        return {"raw_size": raw, "legal_count": legal, "legal_fraction": legal / raw if raw else 0.0,
                "degree_tuples": int(len(self.degree_tuples)), "transport_combos": self.n_transport,
                "scenario": self.scenario.summary()}


def rules_for(scenario: Scenario) -> SearchSpace:
    """The scenario's legality rules (a default SearchSpace; the rules do not depend on the
    space's options), cached on the scenario."""
    hit = scenario._derived.get("rules")
    if hit is None:
        hit = scenario._derived["rules"] = SearchSpace(scenario)
    return hit
