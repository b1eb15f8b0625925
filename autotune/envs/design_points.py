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
    ], dtype=np.float32)


def production_features(s: Scenario, ev) -> np.ndarray:
    """Where the production configuration's time goes (share of each breakdown term) and how full
    its memory is: the bottleneck a better configuration has to remove. Zeros without one."""
    if ev is None:
        return np.zeros(len(BREAKDOWN_KEYS) + 1, dtype=np.float32)
    hbm = min(b.gpu.hbm_bytes for b in s.cluster.buildings)
    shares = [ev.breakdown[k] / ev.iteration_time_s for k in BREAKDOWN_KEYS]
    return np.array([*shares, min(ev.memory_per_gpu_bytes / hbm, 2.0)], dtype=np.float32)


N_SCENARIO_FEATURES = 26
N_FEATURES = N_SCENARIO_FEATURES + len(BREAKDOWN_KEYS) + 1


def make_point(s: Scenario, space: SearchSpace | None = None, encoding: FlatEncoding | None = None) -> DesignPoint:
    """A design point with its production configuration evaluated once (its time is the reward's
    reference; its breakdown is part of the observation)."""
    space = space or SearchSpace(s)
    prod = production_config(s, space)
    ev = evaluate(s, prod, check=False) if prod is not None else None
    t = ev.iteration_time_s if ev is not None else math.nan
    feats = np.concatenate([scenario_features(s), production_features(s, ev)])
    return DesignPoint(s, space, encoding or FlatEncoding(space), t, feats)


class DesignPointSet:
    def __init__(self, n: int, split: str = "train", seed: int = 0):
        rng = np.random.default_rng(seed + (10_000 if split == "test" else 0))
        self.points: list[DesignPoint] = []
        seen = set()
        while len(self.points) < n:
            s = sample_scenario(rng, split)
            if s.key in seen:
                continue
            seen.add(s.key)
            p = make_point(s)
            if math.isfinite(p.production_s) and p.space.legal_count() > 0:
                self.points.append(p)

    def __len__(self):
        return len(self.points)
