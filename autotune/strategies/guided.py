"""Model-guided search for real backends (``--strategy guided``).

Every trial on a real backend costs minutes to hours, and the cost model already knows a lot:

1. rank the legal space by the cost model (the exact top ``pool``, ``exhaustive_search``);
2. measure a small, diverse batch of the best-ranked (``batch`` configurations, in rank order,
   each differing from the others of its batch in at least ``DIVERSE_KNOBS`` knobs where the
   ranking allows: near-duplicates teach the fit little);
3. refit the calibration on everything measured so far (``calibrate.fit``: compute speed, the
   in-building tier's bandwidth and latency, the crossing tier's latency, the realised fraction
   of its rate; least squares on log time with a ridge towards the scenario's own values, so
   three runs move only what they inform);
4. re-rank with the refitted model and repeat, never measuring a configuration twice.

Stateless, as every strategy: batch j is computed from the first j x ``batch`` trials of the
study in trial order, so a resumed study or a second worker proposes what one process would.
``stop_within``: stop (EXHAUSTED) once the refitted model predicts that no unmeasured
configuration beats the best measured one by more than this fraction; None runs the budget out.
"""
from __future__ import annotations

import copy

from ..trials import COMPLETE, is_interrupted, trial_config
from .base import EXHAUSTED, Strategy

DIVERSE_KNOBS = 2
"""Knobs in which a batch's configurations differ from each other where the ranking allows."""
_KNOBS = ("tp", "cp", "ep", "pp", "placement", "dp_flavour", "pp_schedule", "pp_chunks", "micro_batch",
          "recompute", "overlap_dp", "hetero_split")


def config_key(cfg: dict) -> tuple:
    """The hashable identity of a configuration dict (the same key a study's trials give)."""
    return tuple(sorted(cfg.items()))


def _distance(a: dict, b: dict) -> int:
    """Core knobs that differ, plus 1 if any transport knob does."""
    core = sum(a[k] != b[k] for k in _KNOBS)
    return core + int(any(a[k] != b[k] for k in a if k not in _KNOBS))


def diverse_batch(ranked: list, held: set, size: int) -> list:
    """Up to ``size`` of ``ranked`` (Config, fastest first) not in ``held``: in rank order, each at
    least DIVERSE_KNOBS knobs from those already chosen, then the best of the rest."""
    free = [c for c in ranked if config_key(c.model_dump()) not in held]
    chosen: list = []
    for c in free:
        d = c.model_dump()
        if all(_distance(d, x.model_dump()) >= DIVERSE_KNOBS for x in chosen):
            chosen.append(c)
        if len(chosen) == size:
            return chosen
    for c in free:
        if len(chosen) == size:
            break
        if c not in chosen:
            chosen.append(c)
    return chosen


def refit_scenario(scenario, measured: list, prior_weight: float):
    """The scenario with the calibration refitted on ``measured`` [(Config, seconds)]; the
    scenario itself when nothing was measured."""
    from ..calibrate import fit, start_params, with_params
    if not measured:
        return scenario, None
    c = scenario.cluster
    xb = c.cross_building.bandwidth_Bps if c.cross_building is not None else 0.0
    rows = [{"config": cfg, "xb_Bps": xb, "measured_s": t} for cfg, t in measured]
    p = fit(scenario, rows, start_params(scenario), prior_weight=prior_weight)
    return with_params(scenario, p, xb), p


def rank(space, scenario, pool: int, runnable=None) -> list:
    """The ``pool`` fastest configurations of ``space``'s legal rows under ``scenario`` (the same
    legality, other hardware and network values), fastest first; ``runnable`` filters them."""
    from .exhaustive import exhaustive_search
    s = copy.copy(space)           # the legal rows depend on the model and degrees only: reuse them
    s.scenario = scenario
    top = [c for c, _ in exhaustive_search(s, top_k=min(pool, space.legal_count())).top]
    return [c for c in top if runnable is None or runnable(c)]


def next_batch(space, measured: list, held: set, batch: int, pool: int, prior_weight: float, runnable=None):
    """(batch of configurations to measure next, the refitted scenario's predicted best time of an
    unmeasured configuration, the fitted parameters)."""
    scen, p = refit_scenario(space.scenario, measured, prior_weight)
    ranked = rank(space, scen, pool, runnable)
    chosen = diverse_batch(ranked, held, batch)
    predicted = None
    if chosen:
        from ..costmodel import evaluate
        predicted = evaluate(scen, chosen[0], check=False).iteration_time_s
    return chosen, predicted, p


class GuidedStrategy(Strategy):
    name = "guided"
    seeded_with_baselines = False
    """The ranking already puts the baselines first where the model thinks they are fast."""

    MAX_POOL = 1_000_000
    """Largest candidate pool: every candidate is evaluated by the cost model each round."""

    def __init__(self, batch: int | str = 3, pool: int | str = 512, prior_weight: float | str = 0.25,
                 stop_within: float | str | None = None):
        from ..errors import UserInputError

        def number(name, v, kind):
            """A finite int or float, from a number or its decimal text in ASCII digits (float()
            takes nan, inf and 1_000; int() other scripts' digits)."""
            from ..numtext import finite_float_or_none, int_or_none
            out = None if isinstance(v, bool) else (int_or_none if kind is int else finite_float_or_none)(str(v))
            if out is None:
                raise UserInputError(f"strategy option {name}", v, f"a finite number ({kind.__name__}) written with "
                                     "the digits 0-9")
            return out
        batch, pool = number("batch", batch, int), number("pool", pool, int)
        prior_weight = number("prior_weight", prior_weight, float)
        stop_within = None if stop_within in (None, "", "none") else number("stop_within", stop_within, float)
        if int(batch) < 1:
            raise UserInputError("strategy option batch", batch, "an integer >= 1")
        if not batch <= pool <= self.MAX_POOL:
            raise UserInputError("strategy option pool", pool, f"an integer from batch ({batch}) to "
                                 f"{self.MAX_POOL:,}")
        if float(prior_weight) < 0:
            raise UserInputError("strategy option prior_weight", prior_weight, "a number >= 0")
        if stop_within is not None and not 0 <= float(stop_within) < 1:
            raise UserInputError("strategy option stop_within", stop_within, "a fraction in [0, 1)")
        self.batch, self.pool, self.prior_weight = int(batch), int(pool), float(prior_weight)
        self.stop_within = None if stop_within is None else float(stop_within)

    def propose(self, study):
        from ..specs import Config
        trials = [t for t in study.get_trials(deepcopy=False) if trial_config(t) and not is_interrupted(t)]
        trials.sort(key=lambda t: t.number)
        held = {config_key(trial_config(t)) for t in trials}
        k = len(trials) // self.batch * self.batch              # the batch boundary this proposal belongs to
        measured = [(Config(**trial_config(t)), t.values[0]) for t in trials[:k]
                    if t.state == COMPLETE and t.user_attrs.get("feasible") and t.values]
        held_then = {config_key(trial_config(t)) for t in trials[:k]}
        chosen, predicted, _ = next_batch(self.space, measured, held_then, self.batch, self.pool, self.prior_weight)
        if self.stop_within is not None and measured and predicted is not None:
            if predicted >= min(t for _, t in measured) * (1 - self.stop_within):
                return EXHAUSTED
        for c in chosen:
            if config_key(c.model_dump()) not in held:
                return self.encoding.encode(c)
        return EXHAUSTED
