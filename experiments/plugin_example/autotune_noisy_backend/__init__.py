"""A minimal third-party autotune backend.

Install it next to autotune (``pip install experiments/plugin_example``) and it is found through
the ``autotune.backends`` entry-point group: ``autotune study --backend noisy ...``. Options come
from ``--backend-option key=value`` (here ``noise`` and ``seed``).

It wraps the cost model and multiplies each time by log-normal noise, the way a real cluster's
step times scatter from run to run; a template for a backend that measures something real:
implement ``measure(scenario, config) -> Measurement`` and return a failure with its reason
instead of raising when a run goes wrong.
"""
from __future__ import annotations

import math
import random

from autotune.backends import CostModelBackend, Measurement


class NoisyCostModel:
    name = "noisy"

    def __init__(self, noise: float | str = 0.03, seed: int | str = 0):
        self.noise = float(noise)
        self.rng = random.Random(int(seed))
        self.inner = CostModelBackend()

    def measure(self, scenario, config) -> Measurement:
        m = self.inner.measure(scenario, config)
        if not m.feasible:
            return m
        factor = math.exp(self.rng.gauss(0.0, self.noise))
        return Measurement(iteration_time_s=m.iteration_time_s * factor, feasible=True,
                           breakdown={k: v * factor for k, v in m.breakdown.items()},
                           extra=m.extra | {"noise_factor": factor})
