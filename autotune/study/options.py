"""The options of one study run, resolved: what was given on the command line, checked on its own,
then against the stored study's StudySpec (a given option that differs is refused before anything
is written), each option not given taken from the stored study, else its default."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pydantic

from ..backends import get_backend
from ..errors import UserInputError
from ..numtext import MAX_SEED
from ..specs import Scenario
from ..strategies.registry import NAMES as STRATEGY_NAMES
from ..strategies.registry import make_strategy
from ..tracking import default_tracking_uri, mask_uri
from .spec import (INFEASIBLE_MODES, SCENARIO_OPTIONS, StudyConflict, StudySpec, check_objectives, check_options,
                   describe_scenario, same_value, scenario_differences, stored_fields, stored_option,
                   stored_scenario)

MAX_TRIALS = 10_000_000


@dataclass(frozen=True)
class Given:
    """What the user gave for the options that define a study (None: not given)."""
    scenario: Scenario | None = None
    strategy: str | None = None
    objectives: tuple | None = None
    infeasible: str | None = None
    backend: object = None               # a name, or a backend object (tests, plugins)
    backend_options: dict | None = None
    strategy_options: dict | None = None
    categorical_unordered: bool | None = None
    tracking_uri: str | None = None
    experiment: str | None = None

    @property
    def backend_name(self) -> str | None:
        b = self.backend
        return b if b is None or isinstance(b, str) else getattr(b, "name", type(b).__name__)

    def fields(self) -> dict:
        return {"scenario_key": self.scenario.key if self.scenario is not None else None, "strategy": self.strategy,
                "objectives": self.objectives, "infeasible": self.infeasible, "backend": self.backend_name,
                "categorical_unordered": self.categorical_unordered,
                "backend_options": dict(self.backend_options or {}),
                "strategy_options": dict(self.strategy_options or {}), "experiment": self.experiment}


@dataclass(frozen=True)
class Resolved:
    """A study run's options once resolved: every field has its value."""
    spec: StudySpec
    scenario: Scenario
    strategy: object
    backend: object
    tracking_uri: str
    experiment: str | None


def check_run_options(trials, until, trial_timeout_s, seed, storage, tracking_uri) -> None:
    """Options that are wrong on their own, whatever the study."""
    for option, v in (("--trials", trials), ("--until", until)):
        if v is not None and not 0 < v <= MAX_TRIALS:
            raise UserInputError(option, v, f"an integer from 1 to {MAX_TRIALS:,}")
    if trial_timeout_s is not None and not (math.isfinite(trial_timeout_s) and trial_timeout_s > 0):
        raise UserInputError("--trial-timeout", trial_timeout_s, "a positive number of seconds")
    if not 0 <= int(seed) <= MAX_SEED:             # the samplers' (numpy's) seed range
        raise UserInputError("--seed", seed, f"an integer from 0 to {MAX_SEED}")
    for option, value in (("--storage", storage), ("--tracking-uri", tracking_uri)):
        if value is not None and not str(value).strip():
            raise UserInputError(option, value, "a non-empty URL (leave the option out for the default)")


def check_given(g: Given) -> Given:
    """Given options that are wrong on their own come first (before any stored study is read)."""
    if g.strategy is not None and g.strategy not in STRATEGY_NAMES:
        raise UserInputError("--strategy", g.strategy, "one of " + ", ".join(STRATEGY_NAMES))
    objectives = check_objectives(g.objectives) if g.objectives is not None else None
    if g.infeasible is not None and g.infeasible not in INFEASIBLE_MODES:
        raise UserInputError("--infeasible", g.infeasible, " or ".join(INFEASIBLE_MODES))
    return Given(**{**g.__dict__, "objectives": objectives})


def check_against(given: dict, stored: dict, name: str, before_backend: bool, given_scenario=None,
                  stored_attrs: dict | None = None) -> None:
    """Refuse a given option that differs from the stored study's (StudyConflict). In two steps:
    the backend and its options after the backend was built from what was given (a given option
    that is wrong on its own is reported as such first)."""
    def differs(k):
        return given[k] is not None and k in stored and not same_value(given[k], stored[k])
    if before_backend:
        if differs("scenario_key"):
            try:
                old = stored_scenario(stored_attrs or {}, name)
            except (KeyError, TypeError, UserInputError, pydantic.ValidationError):
                old = None
            diff = scenario_differences(old, given_scenario)
            raise StudyConflict(SCENARIO_OPTIONS, "scenario", name, describe_scenario(old, stored["scenario_key"]),
                                describe_scenario(given_scenario, given["scenario_key"])
                                + (f", differing in {diff}" if diff else ""), leave_out="the scenario options")
        for k, flag, what in (("strategy", "--strategy", "strategy"), ("infeasible", "--infeasible", "infeasible mode"),
                              ("experiment", "--experiment-name", "MLflow experiment"),
                              ("categorical_unordered", "categorical_unordered", "encoding of unordered knobs")):
            if differs(k):
                raise StudyConflict(flag, what, name, repr(stored[k]), repr(given[k]))
        if differs("objectives"):
            raise StudyConflict("--objectives", "set of objectives", name, repr(",".join(stored["objectives"])),
                                repr(",".join(given["objectives"])))
        if "strategy_options" in stored:
            check_options(stored["strategy_options"], given["strategy_options"], name,
                          "strategy option {}", "strategy option {!r}")
        return
    if differs("backend"):
        raise StudyConflict("--backend", "backend", name, repr(stored["backend"]), repr(given["backend"]))
    if "backend_options" in stored and given["backend"] in (None, stored.get("backend")):
        check_options(stored["backend_options"], given["backend_options"], name,
                      "--backend-option {}", "backend option {!r}")


def resolve(g: Given, attrs: dict | None, name: str, track: bool) -> Resolved:
    """Every option's value for this run (see the module docstring); ``attrs``: the stored study's
    attributes (None for a new study)."""
    stored = stored_fields(attrs, name) if attrs is not None else {}
    scenario = g.scenario
    if scenario is None:
        if attrs is None or "scenario_json" not in attrs:
            raise UserInputError("--model", None, "a model and cluster preset (--model, --cluster) or --scenario "
                                 f"FILE: study {name!r} is not in that storage to resume")
        scenario = stored_scenario(attrs, name)
    given = g.fields()
    check_against(given, stored, name, True, g.scenario, attrs)
    default = StudySpec(scenario_key=scenario.key)
    value = {k: given[k] if given[k] is not None else stored.get(k, getattr(default, k))
             for k in ("strategy", "objectives", "infeasible", "backend", "categorical_unordered")}
    # options of the strategy and backend: the stored ones (same strategy or backend), each given one replacing its own
    masked = set(stored.get("masked", ()))
    s_opts = (stored.get("strategy_options", {}) if value["strategy"] == stored.get("strategy") else {}) \
        | given["strategy_options"]
    same_backend = value["backend"] == stored.get("backend")
    b_opts = (stored.get("backend_options", {}) if same_backend else {}) | given["backend_options"]
    for k in b_opts:
        if same_backend and f"backend_options.{k}" in masked and k not in given["backend_options"]:
            raise UserInputError(f"--backend-option {k}", "(not given)",
                                 f"the value study {name!r} was created with, {stored['backend_options'][k]!r}: its "
                                 "secret is not stored with the study, so give it to every worker and resume")
    backend = get_backend(value["backend"], **b_opts) if g.backend is None or isinstance(g.backend, str) else g.backend
    if value["strategy"] == "tpe" and "startup" not in s_opts:
        # a new study takes the backend's default and stores it; one stored without a start-up was
        # created when `legal` was every study's default, and keeps it
        from ..strategies.optuna_samplers import default_startup
        s_opts = s_opts | {"startup": default_startup(backend) if attrs is None else "legal"}
    strategy = make_strategy(value["strategy"], **s_opts)
    check_against(given, stored, name, False)
    tracking_uri = _tracking_uri(g.tracking_uri, stored, masked, name, track)
    experiment = g.experiment if g.experiment is not None else stored.get("experiment")
    if experiment is None and attrs is None and track:     # a new study keeps $MLFLOW_EXPERIMENT_NAME's value
        from ..tracking import EXPERIMENT, experiment_name
        experiment = experiment_name() if experiment_name() != EXPERIMENT else None
    return Resolved(spec=_new_spec(scenario, strategy.name, value, b_opts, s_opts,
                                   g.tracking_uri if g.tracking_uri is not None else stored.get("tracking_uri"),
                                   experiment),
                    scenario=scenario, strategy=strategy, backend=backend, tracking_uri=tracking_uri,
                    experiment=experiment)


def _tracking_uri(given: str | None, stored: dict, masked: set, name: str, track: bool) -> str:
    """The given URI (this host may reach the same store by another address), else the study's,
    else MLflow's default."""
    stored_uri = stored.get("tracking_uri")
    if given is None and stored_uri is not None and "tracking_uri" in masked and track:
        raise UserInputError("--tracking-uri", "(not given)",
                             f"the tracking URI study {name!r} was created with, {stored_uri}: its secret is not "
                             "stored with the study, so give it to every worker and resume (or --no-tracking)")
    return given or (stored_uri if "tracking_uri" not in masked else None) or default_tracking_uri()


def _new_spec(scenario, strategy_name, value, b_opts, s_opts, uri, experiment) -> StudySpec:
    """What a new study stores: secrets masked and named in ``masked``."""
    stored_b, new_masked = [], []
    for k, v in sorted(b_opts.items()):
        sv, m = stored_option(k, v)
        stored_b.append((k, sv))
        if m:
            new_masked.append(f"backend_options.{k}")
    stored_s = [(k, stored_option(k, v)[0]) for k, v in sorted(s_opts.items())]
    if uri is not None and mask_uri(uri) != uri:
        uri = mask_uri(uri)
        new_masked.append("tracking_uri")
    return StudySpec(scenario_key=scenario.key, strategy=strategy_name, objectives=tuple(value["objectives"]),
                     infeasible=value["infeasible"], backend=value["backend"], backend_options=tuple(stored_b),
                     strategy_options=tuple(stored_s), categorical_unordered=bool(value["categorical_unordered"]),
                     tracking_uri=uri, experiment=experiment, masked=tuple(new_masked))
