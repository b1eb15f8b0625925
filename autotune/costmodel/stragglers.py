"""The synchronous step's wait for its slowest rank.

Every rank of a data-parallel step meets the others at the step's collectives, so the step ends
when its slowest rank does. With each rank's step time drawn independently around the model's
time with relative standard deviation sigma (``CostParams.straggler_jitter``: clock and power
throttling, OS and launch jitter, uneven network paths), the expected step is the mean plus
sigma times the expected maximum of n standard normal draws. That maximum grows like
sqrt(2 ln n) for large n (extreme-value asymptotics of the normal law); Blom's (1958) plotting
position ``Phi^-1((n - 0.375) / (n + 0.25))`` gives it within 4.5% at n = 2 (0.590 against the
exact 0.564), 1.9% at 4, 1.1% at 6, 0.75% at 8 and 0.5% from n = 16 on (1.434 against 1.424 at 8, 3.234
against 3.248 at 1,024; quadrature in tests/test_stragglers.py). MegaScale (Jiang et al.,
NSDI'24, section 5) and Llama 3 (section 3.3.4) report such stragglers at scale. sigma is held at
1% (``validation.held.STRAGGLER``, where its source and caveats are), not fitted.
"""
from __future__ import annotations

from statistics import NormalDist


def expected_max_std_normal(n: int) -> float:
    """Expected maximum of ``n`` independent standard normal draws (Blom's approximation); 0 for
    n <= 1."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def straggler_scale(n_gpus: int, jitter: float) -> float:
    """Factor on the step time of ``n_gpus`` ranks that synchronise once a step, each rank's time
    with relative standard deviation ``jitter``: 1 + jitter * E[max of n standard normals]."""
    return 1.0 + max(jitter, 0.0) * expected_max_std_normal(int(n_gpus))
