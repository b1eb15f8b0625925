"""One static HTML file per study or explain run: every figure embedded (PNG as data: URIs), no
script, no external resource, so it opens anywhere and can be attached to a ticket.

A study's report: the scenario and its network tiers, the best configuration against the
baselines (times, speed-ups, top 10), the convergence curve, the breakdowns, the explanation of the
best configuration (``autotune.explain``) and its pipeline timeline (``autotune.timeline``) when the
pipeline is small enough to simulate quickly (MAX_TIMELINE_OPS)."""
from __future__ import annotations

import base64
import html
import io
import math
import time
from pathlib import Path

MAX_TIMELINE_OPS = 3_000
"""Largest pipeline (ops in one step) the report simulates and draws; a larger one is named with the
command that draws it. The event simulator's zero-bubble policy grows about quadratically with the
ops: 1,536 ops (ZBV, pp 8, 32 micro-batches) take 1.3 s here, 12,288 took over 10 minutes."""


def _png(draw) -> str:
    """A data: URI of the PNG ``draw(path)`` writes."""
    buf = io.BytesIO()
    draw(buf)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _table(rows: list, head: list) -> str:
    h = "".join(f"<th>{html.escape(str(c))}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _cfg_text(cfg: dict | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (cfg or {}).items())


STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:1em auto;color:#222}"
         "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}"
         "img{max-width:100%;border:1px solid #eee;margin:.5em 0}code{font-size:12px;word-break:break-all}")


def _page(title: str, parts: list[str]) -> str:
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{''.join(parts)}</body></html>")


def _scenario_part(scen) -> str:
    s = scen.summary()
    lines = "".join(f"<li><code>{html.escape(x)}</code></li>" for x in scen.network_lines())
    return (f"<h2>Scenario</h2><p>{html.escape(s['model'])} x {html.escape(s['cluster'])}: {s['gpus']:,} GPUs in "
            f"{s['buildings']} building{'s' if s['buildings'] != 1 else ''}, batch {s['global_batch_seqs']} x "
            f"{s['seq_len']} tokens</p><ul>{lines}</ul>")


def explain_parts(scen, data: dict, params=None) -> list[str]:
    """The explanation of one configuration: the table per baseline, the figure, the timeline."""
    from .explain import explain_plot
    parts = [f"<h2>Why this configuration</h2><p><code>{html.escape(_cfg_text(data['config']))}</code></p>"]
    rows = []
    for name, b in data["baselines"].items():
        att = b.get("attribution")
        t = b["evaluation"]["iteration_time_s"] if b.get("evaluation") else math.nan
        rows.append([name, f"{t:.4f}", f"{att['gap_s']:+.4f}" if att else "-",
                     "; ".join(f"{s['factor']} {s['saved_s']:+.4f}" + (" (not alone)" if s["note"] else "")
                               for s in att["steps"]) if att else b.get("reason", "-"),
                     f"{att['remainder_s']:+.4f}" if att else "-"])
    parts.append(_table(rows, ["baseline", "time (s)", "gap (s)", "saved by each knob alone (s)", "interactions (s)"]))
    parts.append(f"<img alt='breakdown and attribution' src='{_png(lambda p: explain_plot(data, p))}'>")
    parts.append(_timeline_part(scen, data, params))
    return parts


def _timeline_part(scen, data: dict, params) -> str:
    from .specs import Config
    cfg = Config(**data["config"])
    if cfg.pp == 1:
        return "<p>No pipeline (pp = 1): no timeline.</p>"
    m = int(data["evaluation"]["traffic"]["micro_batches"])
    ops = 3 * m * cfg.pp * max(cfg.pp_chunks, 2)
    if ops > MAX_TIMELINE_OPS:
        return (f"<p>Timeline not drawn here: about {ops:,} ops to simulate. Draw it with <code>autotune timeline "
                f"--config {html.escape(_cfg_text(data['config']))} ...</code></p>")
    from .timeline import timeline, timeline_plot
    tl = timeline(scen, cfg, params)
    return (f"<h2>Pipeline timeline</h2><p>{tl.meta['schedule']}, pp {cfg.pp}: bubble {tl.bubble_s[0]:.4f} s on "
            f"rank 0, of which waiting across buildings {tl.xb_wait_s[0]:.4f} s</p>"
            f"<img alt='pipeline timeline' src='{_png(lambda p: timeline_plot(tl, p))}'>")


def write_explain_report(scen, data: dict, path, params=None) -> float:
    """The HTML report of an explain run; returns the seconds it took."""
    t0 = time.perf_counter()
    page = _page(f"autotune explain: {scen.model.name} x {scen.cluster.name}",
                 [_scenario_part(scen), *explain_parts(scen, data, params)])
    Path(path).write_text(page, encoding="utf-8")
    return time.perf_counter() - t0


def write_study_report(storage: str, study_name: str, path, params=None) -> float:
    """The HTML report of a stored study; returns the seconds it took."""
    import optuna

    from .explain import explain
    from .report import breakdown_plot, convergence_plot
    from .study import load_study_scenario, open_storage
    from .study.spec import BASELINES_BLOB, read_blob
    from .study.summary import top
    from .trials import best_trial, feasible_values, trial_config
    t0 = time.perf_counter()
    scen, _attrs = load_study_scenario(storage, study_name)
    study = optuna.load_study(study_name=study_name, storage=open_storage(storage))
    base = read_blob(study, None, BASELINES_BLOB, "baselines") or {}
    best = best_trial(study)
    trials = study.get_trials(deepcopy=False)
    parts = [_scenario_part(scen), f"<h2>Study {html.escape(study_name)}</h2><p>{len(trials)} trials</p>"]
    times = {k: v.get("iteration_time_s") for k, v in base.items()}
    parts.append(f"<img alt='convergence' src='{_png(lambda p: convergence_plot(feasible_values(trials), p, study_name, times))}'>")
    if best is None:
        parts.append("<p>No feasible configuration found.</p>")
    else:
        rows = [[i + 1, f"{t['iteration_time_s']:.4f}", t["trial"], _cfg_text(t["config"])] for i, t in enumerate(top(study))]
        parts.append(_table(rows, ["rank", "time (s)", "trial", "configuration"]))
        parts.append(_importance_part(study))
        bd = {"best": best.user_attrs.get("breakdown", {})}
        bd.update({k: v.get("breakdown", {}) for k, v in base.items() if v.get("breakdown")})
        parts.append(f"<img alt='breakdowns' src='{_png(lambda p: breakdown_plot(bd, p, study_name))}'>")
        from .specs import Config
        parts += explain_parts(scen, explain(scen, Config(**trial_config(best)), params), params)
    Path(path).write_text(_page(f"autotune study report: {study_name}", parts), encoding="utf-8")
    return time.perf_counter() - t0


def _importance_part(study) -> str:
    """fANOVA importance over real knob values (``study.importance``), or why it is absent."""
    from .extras import missing
    from .study.importance import knob_importances
    if missing("importance"):
        return "<p>Knob importance: install the 'importance' extra (scikit-learn) to compute it.</p>"
    try:
        imp = knob_importances(study)
    except ValueError as e:
        return f"<p>Knob importance: not computed ({html.escape(str(e))}).</p>"
    rows = [[k, f"{v:.3f}"] for k, v in imp.items()]
    return "<h3>Which knobs matter (fANOVA over real knob values)</h3>" + _table(rows, ["knob", "importance"])
