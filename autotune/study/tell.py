"""Recording one measured trial in the study (Optuna's ``study/_tell.py`` concern): its
configuration under the knob names, its breakdown and figures, then the tell.

Out-of-memory configurations are feasibility constraints (samplers that take constraints, with
``--infeasible constraint``) or failed trials with their reason; a failed measurement is a failed
trial with its reason. No made-up large value ever enters the study."""
from __future__ import annotations

import math
from dataclasses import dataclass

import optuna

from ..strategies.optuna_samplers import CONSTRAINT_KEY, SUPPORTS_CONSTRAINTS
from ..trials import config_attrs
from .storage import TOLD_BY_ANOTHER

TRIAL_FIGURES = ("mfu", "memory_per_gpu_bytes", "xb_bytes_per_step", "xb_bytes_per_gpu", "nvlink_bytes_per_gpu",
                 "xb_dp_bytes_per_gpu", "xb_pp_bytes_per_gpu", "xb_ep_bytes_per_gpu", "xb_cp_bytes_per_gpu",
                 "dp_link_s", "dp_exposed_s", "dp_hidden_s")
"""Measurement extras kept with each trial (user attribute ``figures``) and logged to its MLflow
child run: MFU, memory, bytes per tier (cross-building per step and per GPU, NVLink per GPU),
cross-building bytes per parallel dimension, and the DP collectives' link, exposed and hidden time;
and every ``tier.*`` figure (time and bytes per network tier and dimension, ``costmodel.tiers``).
The cost model reports all of them; a real backend those it measures."""
TIER_FIGURE_PREFIX = "tier."


@dataclass(frozen=True)
class Recorder:
    """What recording needs to know about the study run."""
    calls: object                 # StorageCalls: each write retried
    objectives: tuple
    infeasible: str               # "fail" or "constraint"
    sampler_name: str
    hbm_bytes: float
    backend_name: str

    def start(self, trial, config, owner: str | None) -> None:
        """Before the measurement: who runs the trial (unless already written) and its configuration."""
        if owner is not None:
            self.calls(trial.set_user_attr, "owner", owner)
        for k, v in config_attrs(config).items():
            self.calls(trial.set_user_attr, k, v)

    def tell(self, study, trial, m):
        """Store the measurement and tell the study; returns the finished FrozenTrial, or None when
        another worker had already told it (it records and logs it)."""
        call = self.calls
        call(trial.set_user_attr, "breakdown", m.breakdown)
        call(trial.set_user_attr, "feasible", bool(m.feasible))
        if m.failed:                 # not a configuration that ran out of memory: the run itself failed
            call(trial.set_user_attr, "failed", True)
        figures = {k: float(v) for k, v in m.extra.items()
                   if (k in TRIAL_FIGURES or k.startswith(TIER_FIGURE_PREFIX))
                   and isinstance(v, (int, float)) and math.isfinite(float(v))}
        if figures:
            call(trial.set_user_attr, "figures", figures)
        if m.reason:
            call(trial.set_user_attr, "reason", m.reason)
        fail = optuna.trial.TrialState.FAIL
        if m.failed or (not m.feasible and (self.infeasible == "fail" or self.sampler_name not in SUPPORTS_CONSTRAINTS)):
            if not m.reason:        # every failure autotune tells has a reason (none: interrupted)
                call(trial.set_user_attr, "reason", "out of memory (no reason given by the backend)" if not m.failed
                     else "failed (no reason given by the backend)")
            told = call(study.tell, trial, state=fail)        # out of memory: failed with its reason
        else:
            deficit = float(m.extra.get("memory_deficit_bytes", 0.0) or 0.0)
            if self.sampler_name in SUPPORTS_CONSTRAINTS:
                call(trial.set_constraint, CONSTRAINT_KEY, deficit / self.hbm_bytes if not m.feasible else 0.0)
            values = self._values(m)
            if values is None:
                call(trial.set_user_attr, "reason", f"backend {self.backend_name!r} does not report {self.objectives[1:]}")
                told = call(study.tell, trial, state=fail)
            else:
                call(trial.set_user_attr, "objectives", dict(zip(self.objectives, values)))
                told = call(study.tell, trial, values if len(values) > 1 else values[0])
        if told is TOLD_BY_ANOTHER:
            return None
        return call(study._storage.get_trial, trial._trial_id)

    def _values(self, m) -> list | None:
        values = [m.iteration_time_s]
        for o in self.objectives[1:]:
            v = m.extra.get(o)
            if v is None or not math.isfinite(float(v)):
                return None
            values.append(float(v))
        return values
