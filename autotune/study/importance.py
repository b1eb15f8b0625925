"""Which knobs matter: hyperparameter importance over the configurations a study measured, by
their real values (``tp: 8``, ``placement: pp_out``), not over the sampler's encoded indices.

The sampler's parameters are indices into the values still legal given the knobs before them
(``autotune.encoding``), so Optuna's own ``get_param_importances`` on a study would rank index
columns. Here every finished trial's decoded configuration (user attribute ``config``) becomes the
parameters of a trial in an in-memory copy of the study, with one distribution per knob (integer
knobs as integers on a log scale where every value is a positive power-of-two-like size, i.e.
>= 1; named knobs as categories), and Optuna's fANOVA evaluator (Hutter et al., ICML 2014: the share
of the objective's variance a knob explains in a random-forest fit) runs on that copy. Trials
proposed by baselines count like any other measurement. Knobs that took one value in every trial
explain nothing and are left out.
"""
from __future__ import annotations

import optuna

from ..specs.config import CATEGORICAL
from ..trials import COMPLETE, trial_config

MIN_TRIALS = 8
"""Fewest finished trials with two or more values of some knob before importance is computed."""


def knob_importances(study, objective: int = 0, seed: int = 0) -> dict[str, float]:
    """{knob: share of the objective's variance} over the study's completed trials (sum 1, largest
    first). Infeasible trials are left out (no value, or a constraint-violating one). Raises
    ValueError when fewer than MIN_TRIALS trials or no varying knob are there."""
    rows = [(trial_config(t), t.values[objective]) for t in study.get_trials(deepcopy=False, states=(COMPLETE,))
            if t.values and trial_config(t) and t.user_attrs.get("feasible", True)]
    if len(rows) < MIN_TRIALS:
        raise ValueError(f"{len(rows)} feasible completed trials; importance needs at least {MIN_TRIALS}")
    dists = _distributions([c for c, _ in rows])
    if not dists:
        raise ValueError("every knob took the same value in every trial")
    direction = study.directions[objective]
    copy = optuna.create_study(direction=direction)
    copy.add_trials([optuna.trial.create_trial(params={k: c[k] for k in dists}, distributions=dists, value=v)
                     for c, v in rows])
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    return dict(optuna.importance.get_param_importances(copy, evaluator=evaluator))


def _distributions(configs: list[dict]) -> dict:
    """One distribution per knob that varies: categories for named knobs, integers (log scale
    where every value is >= 1) for sizes."""
    out = {}
    common = set(configs[0]).intersection(*configs[1:])   # trials stored by older versions may lack a knob
    for k in (k for k in configs[0] if k in common):
        values = sorted({c[k] for c in configs}, key=str)
        if len(values) < 2:
            continue
        if k in CATEGORICAL or not all(isinstance(v, int) for v in values):
            out[k] = optuna.distributions.CategoricalDistribution(values)
        else:
            lo, hi = min(values), max(values)
            out[k] = optuna.distributions.IntDistribution(lo, hi, log=lo >= 1)
    return out
