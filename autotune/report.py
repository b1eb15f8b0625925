"""Figures and tables from study results (matplotlib, headless)."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .costmodel import BREAKDOWN_KEYS  # noqa: E402


def best_so_far(values):
    out, best = [], math.inf
    for v in values:
        if v is not None and math.isfinite(v):
            best = min(best, v)
        out.append(best)
    return out


def convergence_plot(values, path, title="", baselines: dict | None = None, optimum: float | None = None):
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(1, len(values) + 1), best_so_far(values), label="best so far")
    for name, v in (baselines or {}).items():
        if v and math.isfinite(v):
            ax.axhline(v, ls="--", lw=1, label=name, color={"production": "tab:red", "sota": "tab:orange"}.get(name))
    if optimum:
        ax.axhline(optimum, ls=":", color="k", label="exhaustive optimum")
    ax.set_xlabel("trial")
    ax.set_ylabel("iteration time (s)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def breakdown_plot(breakdowns: dict, path, title=""):
    """Stacked bars of the iteration-time breakdown for named configurations."""
    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(breakdowns)
    bottom = [0.0] * len(names)
    for key in BREAKDOWN_KEYS:
        vals = [breakdowns[n].get(key, 0.0) for n in names]
        ax.bar(names, vals, bottom=bottom, label=key.replace("_s", ""))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("seconds per iteration")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
