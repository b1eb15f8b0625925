"""The Optuna distributions of a study's parameters (the flat encoding's indices)."""
from __future__ import annotations

import optuna

UNORDERED = ("placement", "dp_flavour", "pp_schedule", "recompute", "xb_load_balancing", "xb_loss_recovery",
             "collective")
CATEGORICAL_SAMPLERS = ("tpe", "nsga2", "random")


def distributions_for(encoding, sampler_name: str, categorical_unordered: bool = True) -> dict:
    """Static, always-sampled parameters: unordered knobs categorical for samplers that model
    categories (TPE, NSGA-II); integers elsewhere (CMA-ES and GP need numbers). Measured with
    experiments/tpe_ablation.py on llama4-maverick x campus-5bldg: 4.07% vs 4.77% all-integer.
    The parameters are encoded indices (each knob's index selects among the values still legal
    given the knobs before it, ``autotune.encoding``); every trial also stores its decoded
    configuration under the knob names (``autotune.trials``), which Optuna's views show."""
    out = {}
    for k, n in zip(encoding.names, encoding.sizes):
        if categorical_unordered and k in UNORDERED and sampler_name in CATEGORICAL_SAMPLERS:
            out[k] = optuna.distributions.CategoricalDistribution(list(range(n)))
        else:
            out[k] = optuna.distributions.IntDistribution(0, n - 1)
    return out
