"""A study run: the options resolved (``options``), the study opened or created with its spec
(``spec``, ``storage``), the baselines measured once per study, then the loop (``optimize``) with
the MLflow callback (``autotune.tracking_callback``), then the summary (``summary``)."""
from __future__ import annotations

import json

import optuna
import sqlalchemy.exc

from ..encoding import FlatEncoding
from ..errors import ServiceUnavailable, StorageCorrupt, UserInputError
from ..space import SearchSpace
from ..specs import Config
from ..masking import mask_uri
from .options import Given, check_given, check_run_options, resolve
from .optimize import Budget
from .spec import BASELINES_BLOB, SPEC_ATTR, StudySpec, read_blob, write_new_study
from .storage import DEFAULT_STORAGE, StorageCalls, open_storage, stored_attrs
from .tell import Recorder

DEFAULT_TRIALS = 100
MAX_STUDY_NAME_CHARS = 512
"""Longest study name: Optuna's RDB storage keeps it in a VARCHAR(512) column (``studies.study_name``)."""
"""Trials a run adds when neither ``--trials`` nor ``--until`` is given."""


class StudyRunner:
    def __init__(self, scenario=None, strategy=None, trials: int | None = None, storage: str | None = None,
                 study_name: str | None = None, tracking_uri: str | None = None, seed: int = 0, backend=None,
                 backend_options: dict | None = None, trial_timeout_s: float | None = None, track: bool = True,
                 seed_baselines: bool = True, strategy_options: dict | None = None, progress: bool = False,
                 infeasible: str | None = None, baselines: tuple = ("production", "sota"),
                 known_baselines: dict | None = None, objectives: tuple | None = None,
                 categorical_unordered: bool | None = None, join: bool = False, until: int | None = None,
                 experiment: str | None = None):
        """The options that define a study (``options.Given``) left at None are not given: an
        existing study's stored value is used, else the default; a given one that differs is
        refused (StudyConflict) before anything is written. ``trials``: finished trials this run
        adds (default DEFAULT_TRIALS when ``until`` is not given either); ``until``: run until the
        study holds that many. ``join``: the study must exist already (``autotune worker``)."""
        check_run_options(trials, until, trial_timeout_s, seed, storage, tracking_uri)
        self.budget = Budget(trials=DEFAULT_TRIALS if trials is None and until is None else trials, until=until)
        self.seed, self.join, self.track, self.progress = int(seed), join, track, progress
        self.storage_url, self.trial_timeout_s, self.seed_baselines = storage or DEFAULT_STORAGE, trial_timeout_s, \
            seed_baselines
        if experiment is not None and not str(experiment).strip():
            raise UserInputError("--experiment-name", experiment, "a non-empty MLflow experiment name")
        given = check_given(Given(scenario, strategy, objectives, infeasible, backend, backend_options,
                                  strategy_options, categorical_unordered, tracking_uri, experiment))
        if study_name is not None and (not study_name.strip() or study_name != study_name.strip()
                                       or len(study_name) > MAX_STUDY_NAME_CHARS):
            raise UserInputError("--study-name", study_name, f"a name of 1 to {MAX_STUDY_NAME_CHARS} characters "
                                 "without leading or trailing spaces (leave it out for the derived name)")
        if scenario is None and not study_name:
            raise UserInputError("--study-name", study_name, "the name of an existing study when no scenario is given")
        self.study_name = study_name or \
            f"{scenario.model.name}-{scenario.cluster.name}-{strategy or StudySpec.strategy}-seed{seed}"
        self._st = None
        self._attrs_at_start = self._stored_attrs()      # read only: nothing is written before every check
        r = resolve(given, self._attrs_at_start, self.study_name, track)
        self._given, self.spec, self.scenario, self.strategy = given, r.spec, r.scenario, r.strategy
        self.backend, self.backend_name, self.tracking_uri = r.backend, r.spec.backend, r.tracking_uri
        self.experiment = r.experiment
        self.objectives, self.infeasible = r.spec.objectives, r.spec.infeasible
        if track:
            from ..extras import require
            require("tracking", "--tracking-uri", mask_uri(self.tracking_uri), "--no-tracking")
        self.space = SearchSpace(self.scenario).require_legal()
        self.encoding = FlatEncoding(self.space)
        from .distributions import distributions_for
        self.distributions = distributions_for(self.encoding, self.strategy.sampler_name,
                                               self.spec.categorical_unordered)
        self.baseline_names, self.known_baselines = tuple(baselines), known_baselines
        self.calls = StorageCalls(self.storage_url, self.study_name)
        self.recorder = Recorder(self.calls, self.objectives, self.infeasible, self.strategy.sampler_name,
                                 min(b.gpu.hbm_bytes for b in self.scenario.cluster.buildings), self.backend_name)
        self.note = ""

    def _storage(self):
        if self._st is None:
            self._st = open_storage(self.storage_url)
        return self._st

    def _stored_attrs(self) -> dict | None:
        """The stored study's attributes (None: no such study; a worker's must exist). A SQLite
        file that does not exist yet is not created here."""
        from ..sqlitecheck import sqlite_path
        path = sqlite_path(self.storage_url)
        if path is not None and not path.exists():
            if not self.join:
                return None
            if path.parent.exists():          # (a missing folder: --storage, below)
                raise UserInputError("--study-name", self.study_name, "the name of an existing study in that storage")
        try:
            attrs = stored_attrs(self._storage(), self.study_name)
        except (UserInputError, StorageCorrupt):
            raise
        except Exception as e:  # noqa: BLE001
            raise UserInputError("--storage", mask_uri(self.storage_url), f"a reachable database ({type(e).__name__})") \
                from None
        if attrs is None and self.join:
            raise UserInputError("--study-name", self.study_name, "the name of an existing study in that storage")
        return attrs

    def _open_study(self) -> optuna.Study:
        from .options import check_against
        from .spec import stored_fields
        sampler = self.strategy.sampler(self.seed, len(self.objectives))
        try:
            study = optuna.create_study(study_name=self.study_name, storage=self._storage(), sampler=sampler,
                                        directions=["minimize"] * len(self.objectives), load_if_exists=True)
        except Exception as e:  # noqa: BLE001
            raise UserInputError("--storage", mask_uri(self.storage_url), f"a reachable database ({type(e).__name__})") \
                from None
        attrs = stored_attrs(study._storage, self.study_name)
        if self._attrs_at_start is None and (SPEC_ATTR in attrs or "scenario_key" in attrs):
            # created meanwhile by another process: checked as if it had been there
            stored = stored_fields(attrs, self.study_name)
            check_against(self._given.fields(), stored, self.study_name, True, self.scenario, attrs)
            check_against(self._given.fields(), stored, self.study_name, False)
        if SPEC_ATTR not in attrs and "scenario_key" not in attrs:
            write_new_study(study, self.spec, self.scenario, self.seed)
        return study

    def _baselines(self, study) -> dict:
        """Production and sota configurations and their times, measured once per study."""
        from ..baselines import measure_baselines
        from .measure import measure
        stored = read_blob(study, None, BASELINES_BLOB, "baselines")
        if stored is None and self.known_baselines is not None:
            stored = self.known_baselines
        elif stored is None or not all(stored[n]["config"] for n in self.baseline_names if n in stored):
            self._say(f"measuring the baselines ({', '.join(self.baseline_names)}; sota searches the network-"
                      f"oblivious space of {self.space.legal_count():,} configurations) with {self.backend_name}")
            stored = measure_baselines(self.scenario, self.space, self.baseline_names,
                                       lambda cfg: measure(self.backend, self.scenario, cfg, self.trial_timeout_s))
        else:
            return stored
        study._storage.set_study_system_attr(study._study_id, BASELINES_BLOB, stored)
        return stored

    def _say(self, text: str) -> None:
        """A phase line on stderr while progress is shown (the silent seconds before the first trial)."""
        if self.progress:
            import sys
            print(f"{self.study_name}: {text}", file=sys.stderr, flush=True)

    def run(self) -> dict:
        """Run or resume the study; stored data that cannot be read back (a truncated or garbled
        file that SQLite's quick check let through) is one line naming the file, exit 3."""
        from ..sqlitecheck import sqlite_path
        try:
            from .session import run_session
            return run_session(self)
        except (json.JSONDecodeError, sqlalchemy.exc.DatabaseError) as e:
            where = sqlite_path(self.storage_url) or mask_uri(self.storage_url)
            raise StorageCorrupt("--storage", str(where), f"its stored study cannot be read back ({type(e).__name__}); "
                                 "restore it from a backup") from None

    def first_configs(self, study, base: dict) -> list:
        """(name, Config) of the baselines a search strategy starts from."""
        if not self.strategy.seeded_with_baselines:
            return []
        names = ("production", "sota") if self.seed_baselines else ("production",)
        return [(n, Config(**base[n]["config"])) for n in names if base.get(n, {}).get("config")]

    def raise_if_tracking_gone(self, tracker) -> None:
        if tracker is not None and tracker.dead:
            raise ServiceUnavailable("--tracking-uri", mask_uri(self.tracking_uri), tracker.retries, tracker.dead,
                                     "every finished trial is in the storage; resume with "
                                     f"--study-name {self.study_name} to log them")
