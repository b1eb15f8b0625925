"""Scenario distributions: design points (model x cluster x network) an agent learns across.

A distribution is a seeded generator of scenarios; ``DesignPointSet`` materialises a finite
sample of it with everything an episode needs cached (space, encoding, production time), so
``reset`` costs nothing. Train and test sets come from disjoint seeds and disjoint network values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.baselines import production_config
from autotune.costmodel import BREAKDOWN_KEYS, evaluate
from autotune.encoding import FlatEncoding
from autotune.space import SearchSpace
from autotune.specs import Scenario, build_scenario

MODELS = ("llama3-70b", "llama3-405b", "mixtral-8x7b", "llama4-scout", "llama4-maverick")
CLUSTERS = ("campus-5bldg", "metro-2bldg", "region-pair")
TIER = {"campus-5bldg": "cross_building", "metro-2bldg": "cross_building", "region-pair": "cross_region"}


def sample_scenario(rng: np.random.Generator, split: str = "train") -> Scenario:
    """One design point. Train and test draw network values from interleaved, disjoint grids."""
    model = MODELS[rng.integers(len(MODELS))]
    cluster = CLUSTERS[rng.integers(len(CLUSTERS))]
    tier = TIER[cluster]
    odd = 1 if split == "test" else 0
    oversub = [1.0, 2.0, 2.8, 4.0, 4.5, 7.0, 8.0, 12.0][2 * rng.integers(4) + odd]
    km_grid = {"cross_building": [1, 3, 10, 20, 40, 60, 80, 120], "cross_region": [150, 250, 400, 600, 800, 1000, 1500, 2000]}
    km = km_grid[tier][2 * rng.integers(4) + odd]
    loss = [0.0, 1e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4][2 * rng.integers(4) + odd]
    return build_scenario(model, cluster, overrides=[f"cluster.{tier}.oversubscription={oversub}",
                                                     f"cluster.{tier}.distance_km={km}",
                                                     f"cluster.{tier}.loss_rate={loss}"])


UNSEEN_MODELS = ("llama3-70b", "llama3-405b", "gpt3-175b", "mixtral-8x7b", "llama4-scout", "llama4-maverick",
                 "deepseek-v3")
MOE_MODELS = ("mixtral-8x7b", "llama4-scout", "llama4-maverick", "deepseek-v3")
UNSEEN_GPUS = ("a100-80gb", "h100-sxm", "h800", "h200", "b200")
"""GPU types an unseen design point draws from: the training split uses h100-sxm only."""
UNSEEN_GPUS_PER_BUILDING = (256, 512, 1024)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def sample_unseen_scenario(rng: np.random.Generator, moe: bool | None = None) -> Scenario:
    """A design point outside the presets and the training grids, for judging strategies on
    scenarios nobody tuned them on (issue 16): any preset model (``moe`` forces the kind), other
    GPU types (in 3 of 10 points two types, a slow one in some buildings), 256-1,024 GPUs per
    building, and the crossing link drawn from continuous ranges: per-GPU bandwidth 6-50 GB/s,
    oversubscription 1-16:1, distance 1-120 km (campus, metro) or 150-2,000 km (regions), loss 0
    or 1e-7..1e-3. Continuous draws never land on the training split's grid values."""
    pool = UNSEEN_MODELS if moe is None else tuple(m for m in UNSEEN_MODELS if (m in MOE_MODELS) == moe)
    model = pool[rng.integers(len(pool))]
    cluster = CLUSTERS[rng.integers(len(CLUSTERS))]
    tier = TIER[cluster]
    B = 5 if cluster == "campus-5bldg" else 2
    fast = UNSEEN_GPUS[rng.integers(len(UNSEEN_GPUS))]
    gpus = [fast] * B
    if rng.random() < 0.3:
        slow = UNSEEN_GPUS[rng.integers(len(UNSEEN_GPUS))]
        for b in rng.choice(B, size=int(rng.integers(1, B)), replace=False).tolist():
            gpus[b] = slow
    per_building = UNSEEN_GPUS_PER_BUILDING[rng.integers(len(UNSEEN_GPUS_PER_BUILDING))]
    km = _log_uniform(rng, 1, 120) if tier == "cross_building" else _log_uniform(rng, 150, 2000)
    loss = 0.0 if rng.random() < 0.2 else _log_uniform(rng, 1e-7, 1e-3)
    overrides = [f"cluster.{tier}.bandwidth_Bps={_log_uniform(rng, 6.25e9, 50e9):.4g}",
                 f"cluster.{tier}.oversubscription={_log_uniform(rng, 1, 16):.3g}",
                 f"cluster.{tier}.distance_km={km:.4g}", f"cluster.{tier}.loss_rate={loss:.3g}"]
    overrides += [f"cluster.buildings.{b}.gpu={g}" for b, g in enumerate(gpus)]
    return build_scenario(model, cluster, gpus=per_building * B, overrides=overrides)


@dataclass
class DesignPoint:
    scenario: Scenario
    space: SearchSpace
    encoding: FlatEncoding
    production_s: float
    features: np.ndarray


def scenario_features(s: Scenario) -> np.ndarray:
    """Scale-free description of a design point (logs and ratios), about unit range."""
    m, c = s.model, s.cluster
    t = c.inter_building_tier or c.scale_out
    g = c.buildings[0].gpu
    lg = math.log2
    return np.array([
        lg(m.n_layers) / 7, lg(m.hidden) / 15, lg(m.ffn_hidden) / 16, lg(m.n_heads) / 8,
        m.n_kv_heads / m.n_heads, float(m.is_moe), lg(max(m.moe_experts, 1)) / 8, m.moe_top_k / 8,
        m.n_moe_layers / m.n_layers, lg(m.vocab) / 18, lg(m.active_params) / 40, lg(m.total_params) / 40,
        lg(s.seq_len) / 16, lg(s.global_batch_seqs) / 16, float(s.precision == "fp8"),
        lg(s.n_gpus) / 17, c.n_buildings / 8, lg(min(b.gpus for b in c.buildings)) / 17,
        lg(g.hbm_bytes) / 40, lg(g.peak_flops_bf16) / 52,
        lg(t.bandwidth_Bps) / 40, lg(t.oversubscription + 1) / 4, lg(t.one_way_latency_s * 1e6 + 1) / 14,
        math.log10(t.loss_rate + 1e-9) / -9, lg(t.n_paths) / 12,
        float(len({b.region for b in c.buildings}) > 1),
        # mixed and other hardware: the slowest GPU against the fastest, the smallest HBM against
        # the largest, and the per-GPU NVLink and NIC rates
        min(b.gpu.peak_flops_bf16 for b in c.buildings) / max(b.gpu.peak_flops_bf16 for b in c.buildings),
        min(b.gpu.hbm_bytes for b in c.buildings) / max(b.gpu.hbm_bytes for b in c.buildings),
        lg(g.nvlink_bandwidth_Bps) / 40, lg(g.nic_bandwidth_Bps) / 40,
    ], dtype=np.float32)


FEATURE_BREAKDOWN_KEYS = tuple(k for k in BREAKDOWN_KEYS if k not in ("straggler_s", "host_s"))
"""The breakdown terms the policy sees (compute through optimizer): eight, as the policy's input
layer was built; the straggler wait is left out and the host-launch gap is counted in the compute
share (``production_features``)."""


def production_features(s: Scenario, ev) -> np.ndarray:
    """Where the production configuration's time goes (share of each breakdown term) and how full
    its memory is: the bottleneck a better configuration has to remove. Zeros without one."""
    if ev is None:
        return np.zeros(len(FEATURE_BREAKDOWN_KEYS) + 1, dtype=np.float32)
    hbm = min(b.gpu.hbm_bytes for b in s.cluster.buildings)
    # shares of the time before the straggler wait, summing to 1: the host-launch gap (a pass
    # waiting on its host instead of its GPU work) is counted with the compute it lengthens
    rest = ev.iteration_time_s - ev.breakdown.get("straggler_s", 0.0)
    part = dict(ev.breakdown, compute_s=ev.breakdown["compute_s"] + ev.breakdown.get("host_s", 0.0))
    shares = [part[k] / rest for k in FEATURE_BREAKDOWN_KEYS]
    return np.array([*shares, min(ev.memory_per_gpu_bytes / hbm, 2.0)], dtype=np.float32)


N_SCENARIO_FEATURES = 30
N_FEATURES = N_SCENARIO_FEATURES + len(FEATURE_BREAKDOWN_KEYS) + 1


def fitting_space(space: SearchSpace) -> SearchSpace:
    """A copy of ``space`` whose legal core keeps only the rows the memory model says fit (the
    exact search's first pass, ``exhaustive.core_fits_and_bounds``, at each core row's own
    transport knobs). The agent's actions decode over it, so every proposal fits by the model,
    except that a dp_out row sharing micro-batches by speed between GPU types, decoded with other
    transport knobs, may not (its shares, and memory, follow the exchanges). Where no row fits,
    the space itself: its proposals are then out of memory, and reported so."""
    import copy

    from autotune.space import take
    from autotune.strategies.exhaustive import core_fits_and_bounds
    core = space.legal_core
    fits, _ = core_fits_and_bounds(space.scenario, core, floor=False)
    if not fits.any():
        return space
    out = copy.copy(space)
    out.__dict__["legal_core"] = take(core, np.flatnonzero(fits))
    return out


def make_point(s: Scenario, space: SearchSpace | None = None) -> DesignPoint:
    """A design point with its production configuration evaluated once (its time is the reward's
    reference; its breakdown is part of the observation). Its encoding runs over the rows that
    fit in memory (``fitting_space``); ``space`` stays the whole legal space."""
    space = space or SearchSpace(s)
    prod = production_config(s, space)
    ev = evaluate(s, prod, check=False) if prod is not None else None
    t = ev.iteration_time_s if ev is not None else math.nan
    feats = np.concatenate([scenario_features(s), production_features(s, ev)])
    return DesignPoint(s, space, FlatEncoding(fitting_space(space)), t, feats)


class DesignPointSet:
    """``n`` design points of a split: "train" and "test" (``sample_scenario``'s interleaved
    grids over the preset hardware), or "unseen" (``sample_unseen_scenario``: other hardware and
    continuous network values; every other point a mixture-of-experts model)."""

    def __init__(self, n: int, split: str = "train", seed: int = 0):
        if split not in ("train", "test", "unseen"):
            raise ValueError(f"split {split!r}: train, test or unseen")
        rng = np.random.default_rng(seed + {"train": 0, "test": 10_000, "unseen": 20_000}[split])
        self.points: list[DesignPoint] = []
        seen = set()
        while len(self.points) < n:
            s = sample_unseen_scenario(rng, moe=len(self.points) % 2 == 1) if split == "unseen" \
                else sample_scenario(rng, split)
            if s.key in seen:
                continue
            seen.add(s.key)
            p = make_point(s)
            if math.isfinite(p.production_s) and p.space.legal_count() > 0:
                self.points.append(p)

    def __len__(self):
        return len(self.points)
