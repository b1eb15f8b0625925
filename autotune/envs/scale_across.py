"""ScaleAcross-v0: choose a training configuration for a design point, in one shot.

- observation: the design point (model, batch, cluster and network), normalised, and where the
  production configuration's time goes (cost-model breakdown shares, memory fill) (Box).
- action: one index per knob (MultiDiscrete, fixed sizes across design points). Each index picks,
  by scaling, among the values still legal given the knobs before it (the same sequential
  decoding as the study's encoding) over the legal rows the memory model says fit
  (``design_points.fitting_space``), so every action is a legal configuration that fits by the model. The transport
  knobs include NCCL's protocol and channel count; NCCL_BUFFSIZE and the bucket size take the
  space's single default value.
- action_masks(): knobs with a single legal value in this design point (e.g. transport on one
  building, expert parallelism for a dense model) are masked to index 0.
- reward: log(T_production / T_chosen); an out-of-memory choice gets -1 - log(1 + deficit/HBM)
  (graded: the further from fitting, the worse); a failed measurement gets -3.
- info: configuration, iteration time, breakdown, feasibility and reason, production time.
Episodes are one step long (a contextual bandit): reset samples a design point.
"""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from autotune.backends import Measurement, get_backend

from .design_points import N_FEATURES, DesignPointSet

ACTION_SIZES = {"tp": 4, "cp": 4, "ep": 9, "pp_rank": 32, "placement": 5, "dp_flavour": 4, "pp_schedule": 7,
                "pp_chunks": 6, "micro_batch": 4, "recompute": 3, "xb_load_balancing": 3,
                "xb_queue_pairs": 5, "xb_loss_recovery": 2, "collective": 4, "nccl_protocol": 4,
                "nccl_channels": 4, "hetero_split": 2}
INFEASIBLE_BASE_REWARD = -1.0
FAILED_REWARD = -3.0


class ScaleAcrossEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, design_points: DesignPointSet | None = None, n_points: int = 8, split: str = "train",
                 seed: int = 0, backend: str | object = "costmodel"):
        super().__init__()
        self.points = design_points if design_points is not None else DesignPointSet(n_points, split, seed)
        self.backend = get_backend(backend) if isinstance(backend, str) else backend
        self.names = list(ACTION_SIZES)
        self.action_space = spaces.MultiDiscrete([ACTION_SIZES[k] for k in self.names])
        self.observation_space = spaces.Box(low=-2.0, high=2.0, shape=(N_FEATURES,), dtype=np.float32)
        self.point = None

    # -------------------------------------------------------------- helpers
    def decode(self, action) -> object:
        enc = self.point.encoding
        idx = {}
        for k, a in zip(self.names, np.asarray(action).tolist()):
            size = enc.sizes[enc.names.index(k)]
            idx[k] = int(a) * size // ACTION_SIZES[k]
        return enc.decode(idx)

    def action_masks(self) -> np.ndarray:
        enc = self.point.encoding
        masks = []
        for k in self.names:
            m = np.ones(ACTION_SIZES[k], dtype=bool)
            if enc.sizes[enc.names.index(k)] == 1:
                m[1:] = False
            masks.append(m)
        return np.concatenate(masks)

    def _obs(self):
        return np.clip(self.point.features, -2.0, 2.0).astype(np.float32)

    # -------------------------------------------------------------- gym API
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        i = int(self.np_random.integers(len(self.points.points)))
        if options and "index" in options:
            i = int(options["index"])
        self.point = self.points.points[i]
        return self._obs(), {"scenario": self.point.scenario.summary(), "production_s": self.point.production_s}

    def step(self, action):
        cfg = self.decode(action)
        try:
            m = self.backend.measure(self.point.scenario, cfg).checked()
        except Exception as e:  # noqa: BLE001 - a crashing backend is a failed measurement
            m = Measurement.failure(f"backend raised {type(e).__name__}: {e}")
        if m.failed:
            reward = FAILED_REWARD
        elif not m.feasible:
            hbm = min(b.gpu.hbm_bytes for b in self.point.scenario.cluster.buildings)
            reward = INFEASIBLE_BASE_REWARD - math.log1p(m.extra.get("memory_deficit_bytes", hbm) / hbm)
        else:
            reward = math.log(self.point.production_s / m.iteration_time_s)
        info = {"config": cfg.model_dump(), "iteration_time_s": m.iteration_time_s, "feasible": m.feasible,
                "reason": m.reason, "breakdown": m.breakdown, "production_s": self.point.production_s,
                "failed": m.failed}
        return self._obs(), float(reward), True, False, info
