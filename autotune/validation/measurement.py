"""The measurement of a runs-CSV row: which metric, its value, and whether any run could have
measured it (``rows.build_case`` calls these first and after the hardware is known)."""
from __future__ import annotations

import math

from .columns import METRICS, Skip, _cell


def _measurement(row: dict) -> tuple[str, float]:
    """(metric, measured value) of a row; Skip where there is nothing to compare with."""
    metric = _cell(row, "measured_metric")
    if metric not in METRICS:
        raise Skip(f"not one of {', '.join(METRICS)}", "measured_metric", metric)
    raw = _cell(row, "measured_value")
    if raw == "":
        raise Skip("empty (nothing to compare with)", "measured_value", raw)
    try:
        measured = float(raw)
    except ValueError:
        raise Skip("not a number", "measured_value", raw) from None
    if not math.isfinite(measured) or measured <= 0:
        raise Skip("not a positive finite number", "measured_value", raw)
    return metric, measured


def _check_plausible(metric: str, measured: float, precision: str, hw, gpu: str) -> None:
    """Skip a measurement no run can have made: an MFU above 100% or below 1% (a fraction where
    a percentage is asked for), a TFLOP/s per GPU above the GPU's dense peak at the precision."""
    if metric == "mfu_pct" and not 1.0 <= measured <= 100.0:
        raise Skip("a percentage from 1 to 100 (45 for 45%, not 0.45)", "measured_value", f"{measured:g}")
    peak = hw.peak_flops_fp8 if precision == "fp8" else hw.peak_flops_bf16
    if metric == "tflops_per_gpu" and measured * 1e12 > peak:
        raise Skip(f"at most the {gpu} dense {precision} peak, {peak / 1e12:g} TFLOP/s", "measured_value",
                   f"{measured:g}")
