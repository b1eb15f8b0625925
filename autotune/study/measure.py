"""Measuring one configuration for a study: a deadline, exceptions and garbage turned into failed
measurements with their reason, and failed trials counted by the kind of their reason."""
from __future__ import annotations

import threading

import optuna

from ..backends import Measurement
from ..trials import INTERRUPTED

FAILURE_KINDS = (("timed out", "timeout"), ("invalid iteration time: nan", "NaN time"),
                 ("invalid iteration time: inf", "infinite time"), ("invalid iteration time: -", "negative time"),
                 ("invalid iteration time", "invalid time"), ("command failed (signal", "killed mid-run"),
                 ("out of memory", "out of memory"), (INTERRUPTED, INTERRUPTED),
                 ("backend raised", "backend raised"), ("no JSON line", "no result line"),
                 ("command failed", "command failed"), ("does not report", "missing objective"),
                 ("non-numeric step time", "invalid time"), ("not JSON true or false", "invalid result"))


def failure_kinds(trials) -> dict:
    """Failed trials counted by the kind of their reason (summary and README table)."""
    out: dict[str, int] = {}
    for t in trials:
        if t.state != optuna.trial.TrialState.FAIL:
            continue
        reason = str(t.user_attrs.get("reason", "")) or INTERRUPTED     # no reason: failed by the heartbeat check
        kind = next((k for needle, k in FAILURE_KINDS if needle in reason), "other")
        out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items()))


def measure(backend, scenario, config, timeout_s: float | None) -> Measurement:
    """Measure with a deadline; exceptions and garbage become failures with their reason."""
    box: dict = {}

    def call():
        try:
            box["m"] = backend.measure(scenario, config)
        except BaseException as e:  # noqa: BLE001 - reported below as the trial's reason
            box["e"] = e
    if timeout_s:
        # a daemon thread: a backend hung for good can neither block the study nor its exit
        th = threading.Thread(target=call, name="autotune-measure", daemon=True)
        th.start()
        th.join(timeout_s)
        if th.is_alive():
            return Measurement.failure(f"timed out after {timeout_s:g} s")
    else:
        call()
    if "e" in box:
        e = box["e"]
        if isinstance(e, KeyboardInterrupt):
            raise e
        return Measurement.failure(f"backend raised {type(e).__name__}: {str(e)[:300]}")
    m = box.get("m")
    if not isinstance(m, Measurement):
        return Measurement.failure(f"backend returned {type(m).__name__}, not a Measurement")
    return m.checked()
