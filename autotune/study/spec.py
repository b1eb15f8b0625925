"""What defines a study (StudySpec), stored with it when it is created and read back by every
worker and resume: the stored value of each option not given is used; a given option with another
value is refused in one line (StudyConflict), before anything is written."""
from __future__ import annotations

from dataclasses import dataclass

import pydantic

from ..errors import UserInputError, from_pydantic
from ..specs import Scenario

OBJECTIVES = ("iteration_time_s", "xb_bytes_per_step", "memory_per_gpu_bytes")
"""Minimised objectives a study may ask for; more than one makes it multi-objective (Pareto front;
NSGA-II or TPE). Memory per GPU stands for memory headroom (less used = more headroom)."""
INFEASIBLE_MODES = ("fail", "constraint")
"""How an out-of-memory configuration enters the study: a failed trial with its reason (default),
or an Optuna constraint whose value is the memory deficit over HBM (samplers that take
constraints: tpe, gp, nsga2). Within seed noise of each other for TPE (experiments/tpe_ablation.py)."""

SPEC_ATTR = "spec"
"""The study user attribute that holds its StudySpec."""
SPEC_VERSION = 1
SCENARIO_OPTIONS = "--model/--cluster/--scenario/--set"


@dataclass(frozen=True)
class StudySpec:
    """What defines a study: written once, when the study is created, as the study user attribute
    ``spec``, and read back by every ``autotune worker`` and every resume, which use it for each
    option they are not given and refuse one they are given with another value (StudyConflict).

    Compact: the scenario by its key (its JSON is the ``scenario_json`` attribute, written beside it),
    options at their empty default left out. A secret (a password in the tracking URI, a
    secret-looking backend option) is stored masked and named in ``masked``: each process that
    needs it is given it again. Per process, not stored: trials, seed, storage URL, trial
    timeout, whether to track."""
    scenario_key: str
    strategy: str = "tpe"
    objectives: tuple = ("iteration_time_s",)
    infeasible: str = "fail"
    backend: str = "costmodel"
    backend_options: tuple = ()          # ((key, value), ...) sorted by key
    strategy_options: tuple = ()         # ((key, value), ...) sorted by key
    categorical_unordered: bool = True
    tracking_uri: str | None = None      # None: the default (sqlite:///mlflow.db)
    experiment: str | None = None        # None: $MLFLOW_EXPERIMENT_NAME, else autotune
    masked: tuple = ()                   # "tracking_uri", "backend_options.KEY": stored masked

    def to_attr(self) -> dict:
        d = {"v": SPEC_VERSION, "scenario_key": self.scenario_key, "strategy": self.strategy,
             "objectives": list(self.objectives), "infeasible": self.infeasible, "backend": self.backend}
        if self.backend_options:
            d["backend_options"] = dict(self.backend_options)
        if self.strategy_options:
            d["strategy_options"] = dict(self.strategy_options)
        if not self.categorical_unordered:
            d["categorical_unordered"] = False
        if self.tracking_uri is not None:
            d["tracking_uri"] = self.tracking_uri
        if self.experiment is not None:
            d["experiment"] = self.experiment
        if self.masked:
            d["masked"] = list(self.masked)
        return d

    @classmethod
    def from_attr(cls, d, study_name: str = "") -> "StudySpec":
        def bad(why):
            return UserInputError(f"--study-name {study_name} (its stored {SPEC_ATTR})", "{...}" if isinstance(d, dict)
                                  else d, why)
        if not isinstance(d, dict):
            raise bad("a mapping written by autotune")
        if not isinstance(d.get("v"), int) or d["v"] > SPEC_VERSION:
            raise bad(f"a spec of version <= {SPEC_VERSION} (a newer autotune wrote it: upgrade)")
        try:
            spec = cls(scenario_key=str(d["scenario_key"]), strategy=str(d["strategy"]),
                       objectives=tuple(str(o) for o in d["objectives"]), infeasible=str(d["infeasible"]),
                       backend=str(d["backend"]),
                       backend_options=tuple(sorted(dict(d.get("backend_options") or {}).items())),
                       strategy_options=tuple(sorted(dict(d.get("strategy_options") or {}).items())),
                       categorical_unordered=bool(d.get("categorical_unordered", True)),
                       tracking_uri=None if d.get("tracking_uri") is None else str(d["tracking_uri"]),
                       experiment=None if d.get("experiment") is None else str(d["experiment"]),
                       masked=tuple(str(m) for m in d.get("masked") or ()))
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"a spec written by autotune ({type(e).__name__}: {e})") from None
        return spec

    def fields(self) -> dict:
        """What a worker or resume is checked against (all of it)."""
        return {"scenario_key": self.scenario_key, "strategy": self.strategy, "objectives": self.objectives,
                "infeasible": self.infeasible, "backend": self.backend, "categorical_unordered": self.categorical_unordered,
                "backend_options": dict(self.backend_options), "strategy_options": dict(self.strategy_options),
                "tracking_uri": self.tracking_uri, "experiment": self.experiment, "masked": self.masked}


def stored_fields(attrs: dict, study_name: str) -> dict:
    """The options an existing study was created with: its StudySpec, or for a study written
    before the spec, what it kept then (scenario, strategy, objectives, backend); options it did
    not keep are taken as given (or at their default) and never refused."""
    if SPEC_ATTR in attrs:
        return StudySpec.from_attr(attrs[SPEC_ATTR], study_name).fields()
    out = {}
    if "scenario_key" in attrs:
        out["scenario_key"] = str(attrs["scenario_key"])
    if "strategy" in attrs:
        out["strategy"] = str(attrs["strategy"])
    if "objectives" in attrs:
        out["objectives"] = tuple(attrs["objectives"])
    if "backend" in attrs:
        out["backend"] = str(attrs["backend"])
    return out


class StudyConflict(UserInputError):
    """A worker or a resume given an option with another value than the stored study's: one line
    naming the option, the stored value and the given one (exit 2); nothing is written."""

    def __init__(self, option: str, what: str, study_name: str, stored: str, given: str, leave_out: str = ""):
        self.field, self.value, self.allowed = option, given, stored
        ValueError.__init__(self, f"{option}: study {study_name!r} was created with a different {what}: stored "
                                  f"{stored}, given {given}; leave {leave_out or option} out to use the stored one, "
                                  "or give another --study-name")


def _plain(v):
    """An option value as stored (JSON): str, number, bool or None as they are, anything else as text."""
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


def stored_option(key: str, value) -> tuple[object, bool]:
    """(value as stored, whether a secret was masked): a secret-looking key, or a value holding a
    URI password or a secret-looking key=value, is never written to the study."""
    from ..masking import MASK, _secret_key, mask_text
    v = _plain(value)
    if v is None or isinstance(v, bool):
        return v, False
    if _secret_key(key):
        return MASK, True
    if isinstance(v, str):
        m = mask_text(v)
        if m != " ".join(v.split()):
            return m, True
    return v, False


def check_options(stored: dict, given: dict, name: str, flag: str, what: str) -> None:
    """Every given option (strategy or backend) must equal the stored one; else one StudyConflict."""
    for k, v in given.items():
        s = stored.get(k)
        if k not in stored or not same_value(stored_option(k, v)[0], s):
            raise StudyConflict(flag.format(k), what.format(k), name,
                                "(not set)" if k not in stored else repr(s), repr(stored_option(k, v)[0]))


def same_value(a, b) -> bool:
    return a == b or str(a) == str(b)


def describe_scenario(s: Scenario | None, key: str) -> str:
    if s is None:
        return f"scenario key {key}"
    return f"{s.model.name} x {s.cluster.name}, {s.n_gpus} GPUs (key {key})"


def scenario_differences(old: Scenario | None, new: Scenario | None, n: int = 3) -> str:
    """The first ``n`` fields in which two scenarios differ, "model.n_layers 4 -> 8", for a refusal
    that says what changed; empty where either is unknown or none differs."""
    if old is None or new is None:
        return ""

    def flat(d, prefix=""):
        if isinstance(d, dict):
            for k, v in d.items():
                yield from flat(v, f"{prefix}{k}.")
        elif isinstance(d, (list, tuple)):
            for i, v in enumerate(d):
                yield from flat(v, f"{prefix}{i}.")
        else:
            yield prefix[:-1], d
    a, b = dict(flat(old.model_dump(mode="json"))), dict(flat(new.model_dump(mode="json")))
    diffs = [f"{k} {a.get(k, '(none)')} -> {b.get(k, '(none)')}" for k in list(a) + [k for k in b if k not in a]
             if a.get(k) != b.get(k)]
    return ", ".join(diffs[:n]) + (f" (+{len(diffs) - n} more)" if len(diffs) > n else "")


def check_objectives(objectives) -> tuple:
    objectives = tuple(objectives)
    bad = [o for o in objectives if o not in OBJECTIVES]
    if bad or not objectives or objectives[0] != "iteration_time_s" or len(set(objectives)) != len(objectives):
        raise UserInputError("--objectives", ",".join(objectives),
                             "iteration_time_s first, then optionally " + " and/or ".join(OBJECTIVES[1:]))
    return objectives


def stored_scenario(attrs: dict, study_name: str) -> Scenario:
    try:
        return Scenario.model_validate_json(attrs["scenario_json"])
    except pydantic.ValidationError as e:      # a stored scenario that no longer validates (or was tampered with)
        err = from_pydantic(e, prefix="scenario")
        raise UserInputError(f"--study-name {study_name} (its stored {err.field})", err.value, err.allowed) from None



SCENARIO_BLOB, BASELINES_BLOB = "autotune:scenario_json", "autotune:baselines"
"""Study system attributes holding the scenario (JSON) and the measured baselines: kept out of the
user attributes so that ``optuna studies`` and optuna-dashboard list a study in one short line."""


def read_blob(study_or_storage, study_id: int | None, key: str, old_key: str):
    """A stored blob (system attribute ``key``), or the user attribute ``old_key`` that studies
    written before the blobs moved kept it in; None if neither."""
    st = getattr(study_or_storage, "_storage", study_or_storage)
    sid = study_id if study_id is not None else study_or_storage._study_id
    sysattrs = st.get_study_system_attrs(sid)
    if key in sysattrs:
        return sysattrs[key]
    return st.get_study_user_attrs(sid).get(old_key)


def write_new_study(study, spec: StudySpec, scenario: Scenario, seed: int) -> None:
    """The attributes a study is created with: its spec and a one-line scenario (user attributes,
    what Optuna's views list), the scenario's JSON (system attribute), the objectives' names."""
    import warnings
    study._storage.set_study_system_attr(study._study_id, SCENARIO_BLOB, scenario.model_dump_json())
    study.set_user_attr("scenario", describe_scenario(scenario, scenario.key))
    study.set_user_attr("seed", seed)
    with warnings.catch_warnings():          # set_metric_names is marked experimental in Optuna
        warnings.simplefilter("ignore")
        study.set_metric_names(list(spec.objectives))   # Optuna's views name the objective
    study.set_user_attr(SPEC_ATTR, spec.to_attr())     # last: its presence says the study is written
