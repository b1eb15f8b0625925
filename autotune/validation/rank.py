"""Rank correlation: does the model order the configurations of one source as measured?"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .rows import RunCase

RANK_MIN_ROWS = 3
"""A configuration group needs at least this many rows: with two, Spearman is always +-1."""
_LAYOUT_FIELDS = ("n_gpus", "tp", "pp", "dp", "cp", "ep", "etp", "pipeline_schedule", "vpp", "zero_or_fsdp", "micro_batch")


def _layout(c: RunCase) -> dict:
    """The parallel layout of a row (as stated; unstated micro-batches are not a difference)."""
    k = c.config
    return {"n_gpus": c.scenario.n_gpus, "tp": k.tp, "pp": k.pp, "dp": k.dp, "cp": k.cp, "ep": k.ep, "etp": k.etp,
            "pipeline_schedule": k.pp_schedule, "vpp": k.pp_chunks, "zero_or_fsdp": k.dp_flavour,
            "micro_batch": k.micro_batch if c.micro_batch_stated else None}


def _workload(c: RunCase) -> dict:
    s = c.scenario
    return {"global_batch_seqs": s.global_batch_seqs, "seq_len": s.seq_len, "precision": s.precision,
            "recompute": c.config.recompute if c.recompute_stated else None}


def _architecture(c: RunCase) -> tuple:
    m = c.scenario.model
    return (m.n_layers, m.hidden, m.ffn_hidden, m.n_heads, m.n_kv_heads, m.vocab, m.moe_experts, m.moe_top_k,
            m.activation)


def average_ranks(x) -> np.ndarray:
    """Ranks 1..n with ties sharing their mean rank (scipy.stats.rankdata's 'average' method,
    written out so that scoring needs no scipy)."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    start = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])       # first index of each run of equal values
    end = np.r_[start[1:], len(xs)]
    mean_rank = (start + end + 1) / 2.0                            # mean of the 1-based ranks start+1 .. end
    ranks = np.empty(len(x))
    ranks[order] = np.repeat(mean_rank, end - start)
    return ranks


def spearman(x, y) -> float | None:
    """Spearman's rho (Pearson correlation of average ranks; ties share their mean rank).
    None when either side is constant (the correlation is undefined). Rounded to 12 decimals:
    rho is a ratio of small integers' sums, and the floating-point residue (0.7999999999999999
    for an exact 0.8 on five rows) must not decide a ">= 0.8" verdict."""
    rx, ry = average_ranks(x), average_ranks(y)
    if len(rx) < 2 or np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return None
    return round(float(np.corrcoef(rx, ry)[0, 1]), 12)


def configuration_groups(cases) -> list[list[RunCase]]:
    """Rows of one source family with the same model architecture (layers, widths, heads, vocab,
    experts; not the name), GPU type and measured metric, that differ in their parallel layout
    (n_gpus, tp, pp, dp, cp, ep, schedule, vpp, DP flavour or stated micro-batch): at least
    RANK_MIN_ROWS rows and at least two distinct layouts. Batch size, sequence length,
    precision and recomputation may vary as well; each group lists what varies."""
    groups: dict[tuple, list[RunCase]] = {}
    for c in cases:
        groups.setdefault((c.family.lower(), _architecture(c), c.gpu, c.metric), []).append(c)
    out = []
    for g in groups.values():
        layouts = {tuple(sorted(_layout(c).items(), key=lambda kv: kv[0])) for c in g}
        if len(g) >= RANK_MIN_ROWS and len(layouts) >= 2:
            out.append(g)
    return out


def _spread(values) -> float:
    """(max - min) / median, in percent: how far apart the values a rank correlation orders are."""
    v = np.asarray(values, dtype=float)
    return float(100.0 * np.ptp(v) / np.median(v))


def _base_name(names) -> str:
    short = sorted({re.sub(r"\s*\(.*\)\s*$", "", n).strip() or n for n in names}, key=len)
    return short[0] if short else ""


def rank_correlations(cases, predicted: dict[int, float], compare: dict[int, float] | None = None) -> dict:
    """Spearman's rho between predicted (row -> value) and measured values in every
    configuration group; ``compare`` adds a second prediction set's rho beside it."""
    groups = []
    for g in configuration_groups(cases):
        meas = [c.measured for c in g]
        pred = [predicted[c.row] for c in g]
        varies = [k for k in (*_LAYOUT_FIELDS, "global_batch_seqs", "seq_len", "precision", "recompute")
                  if len({({**_layout(c), **_workload(c)})[k] for c in g}) > 1]
        entry = {"family": g[0].family, "model": _base_name([c.model_name for c in g]), "gpu": g[0].gpu,
                 "metric": g[0].metric, "n": len(g), "rows": [c.row for c in g],
                 "model_names": sorted({c.model_name for c in g}), "varies": varies,
                 "measured": meas, "predicted": pred, "measured_spread_pct": _spread(meas),
                 "predicted_spread_pct": _spread(pred), "spearman": spearman(pred, meas)}
        if compare is not None:
            entry["spearman_compare"] = spearman([compare[c.row] for c in g], meas)
        groups.append(entry)
    rhos = [g["spearman"] for g in groups if g["spearman"] is not None]
    out = {"rule": "groups: rows of one source family with the same model architecture, GPU type and "
                   f"metric, >= {RANK_MIN_ROWS} rows, >= 2 parallel layouts; Spearman rho of predicted vs measured",
           "groups": groups, "n_groups": len(groups),
           "n_undefined": sum(g["spearman"] is None for g in groups),
           "min_spearman": min(rhos) if rhos else None,
           "mean_spearman": float(np.mean(rhos)) if rhos else None}
    if compare is not None:
        rc = [g["spearman_compare"] for g in groups if g["spearman_compare"] is not None]
        out["min_spearman_compare"] = min(rc) if rc else None
    return out


# ---------------------------------------------------------------------------------- in-sample
