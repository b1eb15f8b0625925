"""MLflow logging of a study as an Optuna-style callback: ``callback(study, frozen_trial)`` after
each finished trial logs its child run; ``finish(study, status)`` logs the parent run's artifacts
(the effective scenario, the best configuration, the convergence and breakdown plots) and metrics.
It reads the stored trials only (``autotune.trials``); it never imports the study runner."""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

import yaml

from .trials import COMPLETE, best_trial, feasible_values, trial_config

BASELINES = ("production", "sota")


class MLflowCallback:
    def __init__(self, tracker, scenario, baselines: dict, study_name: str):
        self.tracker, self.scenario, self.baselines, self.study_name = tracker, scenario, baselines, study_name

    def _baseline_time(self, name: str) -> float | None:
        b = (self.baselines.get(name) or {}).get("iteration_time_s")
        return b if b and math.isfinite(b) else None

    def __call__(self, study, t) -> None:
        """Log one finished trial as a child run: its knobs as parameters; its time, speed-ups over
        the baselines, tokens/s, breakdown, figures and objectives as metrics; state and reason as tags."""
        value = t.values[0] if t.state == COMPLETE and t.values else None
        feasible = bool(t.user_attrs.get("feasible", False)) and value is not None
        metrics = {"feasible": float(feasible)}
        if value is not None:
            metrics["iteration_time_s"] = value
            if feasible:
                for name in BASELINES:
                    if (b := self._baseline_time(name)) is not None:
                        metrics[f"speedup_vs_{name}"] = b / value - 1.0
                metrics["tokens_per_s"] = self.scenario.global_batch_seqs * self.scenario.seq_len / value
        metrics.update(t.user_attrs.get("breakdown") or {})
        metrics.update(t.user_attrs.get("figures") or {})
        metrics.update(t.user_attrs.get("objectives") or {})
        tags = {"autotune.state": t.state.name}
        if t.user_attrs.get("reason"):
            tags["autotune.reason"] = t.user_attrs["reason"][:500]
        self.tracker.log_trial(t.number, trial_config(t) or {}, metrics, tags)

    def finish(self, study, status: str) -> None:
        """The parent run's artifacts and metrics, then flush (artifacts are uploaded before their
        temporary folder goes)."""
        best = best_trial(study)
        metrics = {}
        with tempfile.TemporaryDirectory() as tmp:
            p0 = Path(tmp) / "scenario.yaml"     # the effective scenario, every preset, file and --set applied
            p0.write_text(yaml.safe_dump(self.scenario.model_dump(mode="json"), sort_keys=False))
            self.tracker.log_artifact(str(p0))
            if best is not None:
                p = Path(tmp) / "best_config.yaml"
                p.write_text(yaml.safe_dump({"best_config": trial_config(best), "iteration_time_s": best.values[0],
                                             "baselines": {k: v["config"] for k, v in self.baselines.items()}},
                                            sort_keys=False))
                self.tracker.log_artifact(str(p))
                metrics["best_iteration_time_s"] = best.values[0]
                for name in BASELINES:
                    if (b := self._baseline_time(name)) is not None:
                        metrics[f"speedup_vs_{name}"] = b / best.values[0] - 1.0
            self._plots(study, best, Path(tmp))
            self.tracker.log_study(metrics=metrics)
            self.tracker.flush(status)

    def _plots(self, study, best, tmp: Path) -> None:
        try:
            from .report import breakdown_plot, convergence_plot
            p1 = tmp / "convergence.png"
            convergence_plot(feasible_values(study.get_trials(deepcopy=False)), p1, self.study_name,
                             {k: v["iteration_time_s"] for k, v in self.baselines.items()})
            self.tracker.log_artifact(str(p1))
            if best is not None:
                bd = {"best": best.user_attrs.get("breakdown", {})}
                bd.update({k: v.get("breakdown", {}) for k, v in self.baselines.items() if v.get("breakdown")})
                p2 = tmp / "breakdown.png"
                breakdown_plot(bd, p2, self.study_name)
                self.tracker.log_artifact(str(p2))
        except Exception as e:  # noqa: BLE001 - a plot must not lose the study
            self.tracker.errors.append(f"plots: {type(e).__name__}: {e}")
