"""The reference points every result is compared with (docs/baselines.md says why each is what it is).

- production: what a careful team runs today, from published recipes (``RECIPES``), scaled to
  the cluster: the recipe's TP, PP (and interleaving), CP and EP; Megatron's distributed
  optimizer (ZeRO-1: gradients reduce-scattered, parameters all-gathered once per step, the
  layout the NeMo and Megatron recipes ship; Llama 3's "FSDP without resharding after forward"
  moves the same bytes per step); DP outermost across buildings; NCCL's own algorithm and
  protocol choice with its default channels and buffer; Megatron's 40M-parameter gradient
  buckets; 16 queue pairs per connection with ECMP (Llama 3's E-ECMP); go-back-N (RoCE).
  Where the recipe does not fit the cluster's memory or batch, the next legal choice is taken in
  a documented order (deeper pipeline, then recomputation, then context parallelism).
- naive: the simple rule a newcomer runs: TP in the node, the smallest PP that fits, FSDP
  (ZeRO-3) across everything, 1F1B, one queue pair, NCCL ring. Shows the range, never the headline.
- sota: a strong optimizer blind to scale-across effects: exhaustive search on a copy of the
  scenario whose tiers above the building are the in-building scale-out tier (its bandwidth,
  oversubscription, latency and loss: no extra distance), with the cluster's declared default transport (its tiers' load balancing,
  queue pairs and loss recovery; NCCL's defaults); its choice is then judged on the true network.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .costmodel import evaluate
from .space import SearchSpace, batch_from_configs
from .specs import Config, Scenario
from .strategies.exhaustive import exhaustive_search

BASELINES = ("production", "naive", "sota")


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """A published layout for a model family. Every field names where it comes from."""
    tp: int
    pp: int = 1
    chunks: int = 1              # virtual pipeline stages per rank (interleaved 1F1B when > 1)
    cp: int = 1
    ep: int = 1
    recompute: str = "none"
    source: str


RECIPES: dict[str, Recipe] = {
    "gpt3-175b": Recipe(tp=4, pp=8, chunks=6, source="NVIDIA/NeMo nemo/collections/llm/recipes/gpt3_175b.py "
                        "(f56c560): TP 4, PP 8, VPP 6, MBS 2 (we use 1), distributed optimizer"),
    "llama3-8b": Recipe(tp=1, pp=1, cp=2, source="NVIDIA/NeMo recipes/llama3_8b.py (aed13ee): TP 1, PP 1, CP 2, "
                        "seq 8,192, distributed optimizer, no recomputation"),
    "llama3-70b": Recipe(tp=4, pp=4, chunks=5, cp=2, source="NVIDIA/NeMo recipes/llama3_70b.py (aed13ee): TP 4, "
                         "PP 4, VPP 5, CP 2, distributed optimizer, no recomputation"),
    "llama3-405b": Recipe(tp=8, pp=16, chunks=2, source="Llama 3 Herd of Models (arXiv:2407.21783) sec. 3.3.2: "
                          "TP 8, PP 16 interleaved, FSDP without resharding after forward, CP only for long "
                          "context; VPP 2 from NeMo recipes/llama31_405b.py (aed13ee)"),
    "mixtral-8x7b": Recipe(tp=1, pp=4, chunks=8, ep=8, source="NVIDIA/NeMo recipes/mixtral_8x7b.py (aed13ee): "
                           "TP 1, PP 4, VPP 8, EP 8; Megatron-LM examples/mixtral README: 'TP1EP8PP4'"),
    "llama4-scout": Recipe(tp=4, pp=1, ep=16, source="NVIDIA/NeMo recipes/llama4_e16.py (678394d): TP 4, EP 16, "
                           "expert TP 4"),
    "llama4-maverick": Recipe(tp=4, pp=1, ep=128, source="NVIDIA/NeMo recipes/llama4_e128.py (678394d): TP 4, "
                              "EP 128, expert TP 4"),
    "deepseek-v3": Recipe(tp=2, pp=16, ep=64, recompute="selective", source="NVIDIA/NeMo recipes/deepseek_v3.py "
                          "(024a7e6): TP 2, PP 16, EP 64, 1F1B, selective recomputation (MLA up-projection, norms)"),
}
"""Layouts from the frameworks' published recipe code and the Llama 3 paper's text (not from
any measured-performance table: those are kept for checking the cost model)."""

PRODUCTION_TRANSPORT = dict(collective="nccl_auto", nccl_protocol="auto", nccl_channels=4, nccl_buffer_mib=4,
                            dp_bucket_mib=0, xb_load_balancing="ecmp", xb_queue_pairs=16, xb_loss_recovery="gbn")
"""NCCL defaults (no recipe sets NCCL_ALGO / NCCL_PROTO / NCCL_BUFFSIZE), Megatron's default bucket of
40M parameters (bf16: 80 MB), Llama 3 sec. 3.3.1: 16 flows per GPU pair with enhanced ECMP, RoCE
go-back-N."""
RECOMPUTE_ORDER = ("none", "selective", "full")


def _first_fit(scenario: Scenario, space: SearchSpace, candidates) -> Config | None:
    for cfg in candidates:
        if space.legal_mask(batch_from_configs([cfg]))[0] and evaluate(scenario, cfg, check=False).feasible:
            return cfg
    return None


def _node(scenario: Scenario) -> int:
    return min(b.gpu.nvlink_domain_gpus for b in scenario.cluster.buildings)


def _transport(scenario: Scenario, space: SearchSpace, **over) -> dict:
    t = dict(PRODUCTION_TRANSPORT) | over
    if t["xb_queue_pairs"] not in space.queue_pairs:
        t["xb_queue_pairs"] = max(space.queue_pairs)
    if t["xb_load_balancing"] not in space.load_balancing:
        t["xb_load_balancing"] = space.load_balancing[0]
    if t["xb_loss_recovery"] not in space.loss_recovery:
        t["xb_loss_recovery"] = space.loss_recovery[0]
    return t


def production_candidates(scenario: Scenario, space: SearchSpace):
    """The recipe's family of layouts: its TP, CP, EP and interleaving, with TP raised within the
    node, CP doubled and PP deepened as far as the cluster needs (a recipe is written for a few
    hundred GPUs; at thousands a team deepens the pipeline, as Llama 3 did with PP 16), and
    recomputation from the recipe's setting upwards."""
    m, N = scenario.model, scenario.n_gpus
    node = _node(scenario)
    r = RECIPES.get(m.name) or Recipe(tp=max(t for t in space.tp_values if m.n_kv_heads % t == 0),
                                      pp=1, chunks=2, source="generic: TP in the node, PP as memory needs")
    tps = [t for t in space.tp_values if t >= min(r.tp, node) and m.n_kv_heads % t == 0] or [1]
    pps = [p for p in space.pp_values if p >= r.pp] or [max(space.pp_values)]
    cps = [c for c in space.cp_values if c >= r.cp] or [1]
    transport = _transport(scenario, space)
    for recompute in RECOMPUTE_ORDER[RECOMPUTE_ORDER.index(r.recompute):]:
        for tp in tps:
            for cp in cps:
                for pp in pps:
                    if N % (tp * cp * pp):
                        continue
                    dp = N // (tp * cp * pp)
                    eps = [e for e in space.ep_values if e <= max(r.ep, 1) and (dp * cp) % e == 0] or [1]
                    ep = max(eps) if m.is_moe else 1
                    scheds = [("1f1b", 1)]
                    if pp > 1:
                        # the recipe's interleaving, or the nearest the space offers below it
                        vs = [c for c in space.chunks if c <= r.chunks and pp * c <= m.n_layers]
                        if r.chunks > 1 and vs:
                            scheds.insert(0, ("interleaved_1f1b", max(vs)))
                    for sched, v in scheds:
                        yield Config(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, placement="dp_out",
                                     dp_flavour="zero1" if dp * cp > 1 else "ddp", pp_schedule=sched, pp_chunks=v,
                                     micro_batch=1, recompute=recompute, overlap_dp=1, **transport)


def production_config(scenario: Scenario, space: SearchSpace | None = None) -> Config | None:
    """The recipe family's layout a careful team would pick on its home cluster: of the legal
    candidates that fit in memory, the fastest on the network-oblivious copy (a team tunes depth
    and recomputation where it trains today, a single building), with the default transport."""
    from .costmodel import evaluate_batch
    space = space or SearchSpace(scenario)
    cands = list(production_candidates(scenario, space))
    if not cands:
        return None
    b = batch_from_configs(cands)
    legal = space.legal_mask(b)
    if not legal.any():
        return None
    idx = [i for i in range(len(cands)) if legal[i]]
    sub = {k: v[idx] for k, v in b.items()}
    fits = evaluate_batch(scenario, sub, check=False)["feasible"]
    if not fits.any():
        return None
    t = evaluate_batch(network_oblivious(scenario), sub, check=False)["iteration_time_s"]
    t = [t[j] if fits[j] else math.inf for j in range(len(idx))]
    return cands[idx[min(range(len(idx)), key=lambda j: (t[j], j))]]


def naive_config(scenario: Scenario, space: SearchSpace | None = None) -> Config | None:
    """TP in the node, the smallest PP that fits, FSDP across everything, 1F1B, one queue pair,
    NCCL ring; selective then full recomputation; CP only when nothing else fits."""
    space = space or SearchSpace(scenario)
    m, N = scenario.model, scenario.n_gpus
    tp = max(t for t in space.tp_values if t <= _node(scenario) and m.n_kv_heads % t == 0)
    B = scenario.cluster.n_buildings
    transport = _transport(scenario, space, collective="ring", xb_queue_pairs=1)

    def cands():
        for cp in space.cp_values:
            for recompute in ("selective", "full"):
                for pp in space.pp_values:
                    if N % (tp * pp * cp):
                        continue
                    dp = N // (tp * pp * cp)
                    eps = [e for e in space.ep_values if (dp // max(B, 1)) % e == 0] or [1]
                    yield Config(tp=tp, cp=cp, ep=max(eps) if m.is_moe else 1, pp=pp, dp=dp, placement="dp_out",
                                 dp_flavour="fsdp" if dp * cp > 1 else "ddp", pp_schedule="1f1b", pp_chunks=1,
                                 micro_batch=1, recompute=recompute, **transport)
    return _first_fit(scenario, space, cands())


def network_oblivious(scenario: Scenario) -> Scenario:
    """The scenario as a network-oblivious optimizer sees it: every tier above the building
    behaves like the in-building scale-out tier."""
    c = scenario.cluster
    inside = c.scale_out
    same = {k: inside for k in ("cross_building", "cross_region") if getattr(c, k) is not None}
    if c.cross_zone is not None:
        same["cross_zone"] = c.cross_zone
    return scenario.model_copy(update={"cluster": c.model_copy(update=same)})


def default_transport_space(scenario: Scenario, space: SearchSpace | None = None, tier=None) -> SearchSpace:
    """The space with the transport at the cluster's declared defaults: the cross-building tier's
    (``tier``, default the scenario's own) load balancing, queue pairs and loss recovery, NCCL's own
    algorithm and protocol choice, default channels, buffer and buckets."""
    xt = tier if tier is not None else scenario.cluster.inter_building_tier
    kw = {}
    if space is not None:
        kw = dict(cp_values=space.cp_values, micro_batches=space.micro_batches, chunks=space.chunks,
                  overlap=space.overlap, schedules=space.schedules)
    d = Config()
    lb = xt.load_balancing if xt is not None else "ecmp"
    kw |= dict(queue_pairs=(1 if lb == "packet_spray" else xt.queue_pairs,) if xt is not None else (1,),
               protocols=(d.nccl_protocol,),
               channels=(d.nccl_channels,), buffers_mib=(d.nccl_buffer_mib,), buckets_mib=(d.dp_bucket_mib,),
               load_balancing=(xt.load_balancing,) if xt is not None else None,
               loss_recovery=(xt.loss_recovery,) if xt is not None else None, collectives=(d.collective,))
    return SearchSpace(scenario, **kw)


def sota_config(scenario: Scenario, space: SearchSpace | None = None) -> Config | None:
    blind = network_oblivious(scenario)
    best = exhaustive_search(default_transport_space(blind, space, scenario.cluster.inter_building_tier)).best_config
    if best is None:
        return None
    # the oblivious copy's tier may declare another transport; the choice runs on the true one's
    xt = scenario.cluster.inter_building_tier
    if xt is not None:
        true_space = space or SearchSpace(scenario)
        upd = {"xb_load_balancing": xt.load_balancing, "xb_queue_pairs": xt.queue_pairs,
               "xb_loss_recovery": xt.loss_recovery}
        if upd["xb_load_balancing"] == "packet_spray":
            upd["xb_queue_pairs"] = 1
        cand = best.model_copy(update=upd)
        if true_space.legal_mask(batch_from_configs([cand]))[0]:
            best = cand
    return best


MAKERS = {"production": production_config, "naive": naive_config, "sota": sota_config}


def measure_baselines(scenario: Scenario, space: SearchSpace, names=("production", "sota"), measure=None) -> dict:
    """{name: {config, iteration_time_s, breakdown}} for the named baselines; ``measure`` maps a
    config to a Measurement (default: the cost model). A missing or infeasible baseline is NaN."""
    if measure is None:
        from .backends import CostModelBackend
        backend = CostModelBackend()
        measure = lambda cfg: backend.measure(scenario, cfg)  # noqa: E731
    out = {}
    for name in dict.fromkeys((*names, "production", "sota")):     # both always present (NaN if not asked)
        cfg = MAKERS[name](scenario, space) if name in names else None
        if cfg is None:
            out[name] = {"config": None, "iteration_time_s": math.nan}
            continue
        m = measure(cfg)
        out[name] = {"config": cfg.model_dump(), "iteration_time_s": m.iteration_time_s if m.feasible else math.nan,
                     "breakdown": m.breakdown}
    return out
