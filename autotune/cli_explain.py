"""``autotune explain``, ``timeline``, ``sensitivity`` and ``report``: the commands that show why a
configuration wins (issue 18); ``cli.py`` registers them."""
from __future__ import annotations

import math
from pathlib import Path

import click

from .cli_common import (UserInputError, _check_file_target, _check_image_target, _emit, _header, _params, _print_evaluation,
                         _print_header, _scenario, params_option, scenario_options, tier_summary)


@click.command()
@scenario_options
@click.option("--config", "config_text", default=None,
              help='the configuration to explain ("tp=8,pp=16,..." or a YAML file); default: the exact optimum')
@params_option
@click.option("--out", "out_dir", default=None, help="folder for explain.png (breakdowns and attribution)")
@click.option("--html", "html_path", default=None, help="also write a static HTML report (figures embedded)")
@click.option("--json", "as_json", is_flag=True)
def explain(config_text, params_file, out_dir, html_path, as_json, **kw):
    """Why a configuration beats production, naive and sota: breakdowns side by side, the knobs
    that differ and the time each saves when changed alone (the rest: interactions)."""
    from .explain import explain as run_explain
    from .explain import explain_plot
    params, scen = _params(params_file), _scenario(kw)
    if html_path is not None:
        _check_file_target(html_path, "--html", ("html", "htm"))
    if out_dir is not None:
        from .launch import check_out_dir
        check_out_dir(out_dir)
    try:
        cfg = None
        if config_text is not None:
            from .configparse import make_config, parse_config_text
            cfg = make_config(parse_config_text(config_text), scen.n_gpus)
        data = run_explain(scen, cfg, params) | _header(scen)
    except UserInputError:
        if out_dir is not None and config_text is not None:      # still draw the baselines, then say why
            from .explain import baselines_only
            explain_plot(baselines_only(scen, params), Path(out_dir) / "explain.png",
                         "baselines only: the given configuration is illegal")
        raise
    if out_dir is not None:
        data["files"] = [str(Path(out_dir) / "explain.png")]
        explain_plot(data, data["files"][0], f"{scen.model.name} x {scen.cluster.name}")
    if html_path is not None:
        from .htmlreport import write_explain_report
        data["report_s"] = write_explain_report(scen, data, html_path, params)
        data.setdefault("files", []).append(html_path)

    def human(d):
        _print_header(d)
        e = d["evaluation"]
        click.echo("explained: " + ",".join(f"{k}={v}" for k, v in d["config"].items()))
        _print_evaluation(e)
        for name, b in d["baselines"].items():
            if b.get("config") is None:
                click.echo(f"vs {name}: {b['reason']}")
                continue
            be = b["evaluation"]
            click.echo(f"vs {name}: {be['iteration_time_s']:.4f} s"
                       + ("" if be["feasible"] else f" (INFEASIBLE: {be['reason']})"))
            click.echo("  " + tier_summary(be.get("tiers") or {}))
            att = b.get("attribution")
            if att:
                gap = att["gap_s"]
                verdict = ("this configuration is faster" if gap > 0 else
                           "this configuration is slower" if gap < 0 else "the same time")
                click.echo(f"  gap {gap:+.4f} s ({name}'s time minus this one's: {verdict}); changed one at a "
                           "time, each line the seconds it saves (+) or costs (-):")
                for st in att["steps"]:
                    click.echo(f"    {st['factor']:<18} {st['baseline']} -> {st['explained']}: "
                               f"{st['saved_s']:+.4f} s" + (f"  ({st['note']})" if st["note"] else ""))
                click.echo(f"    {'interactions':<18} {att['remainder_s']:+.4f} s")
        for f in d.get("files", []):
            click.echo(f"wrote {f}")
    _emit(data, as_json, human)


@click.command()
@scenario_options
@click.option("--axis", default="bandwidth,distance,loss", help="comma-separated: bandwidth, distance, loss")
@click.option("--values", "values_text", default=None,
              help="comma-separated points for a single --axis (bandwidth: multiples of the nominal)")
@params_option
@click.option("--out", "out_png", default="sensitivity.png", help="the PNG to write")
@click.option("--json", "as_json", is_flag=True)
def sensitivity(axis, values_text, params_file, out_png, as_json, **kw):
    """The exact optimum as the cross-building link gets worse or better: one sweep per axis, the
    nominal optimum's time beside it, the points where the optimum switches marked."""
    from .sensitivity import sensitivity_plot, sweep
    params, scen = _params(params_file), _scenario(kw)
    axes = [a.strip() for a in axis.split(",")]
    if len(set(axes)) < len(axes):
        raise UserInputError("--axis", axis, "each axis once, among bandwidth, distance, loss")
    values = None
    if values_text is not None:
        if len(axes) != 1:
            raise UserInputError("--values", values_text, "points for one --axis at a time")
        try:
            values = [float(x) for x in values_text.split(",")]
        except ValueError:
            raise UserInputError("--values", values_text, "comma-separated numbers") from None
        if not all(math.isfinite(v) and v >= 0 for v in values) or len(values) > 64:
            raise UserInputError("--values", values_text, "up to 64 finite numbers >= 0")
    _check_image_target(out_png, "--out")
    first = sweep(scen, axes[0], values, params)
    from .specs import Config
    results = [first] + [sweep(scen, a, values, params, Config(**first["nominal_config"])) for a in axes[1:]]
    sensitivity_plot(results, out_png, f"{scen.model.name} x {scen.cluster.name}")
    data = {"sweeps": results, "file": out_png} | _header(scen)

    def human(d):
        _print_header(d)
        for r in d["sweeps"]:
            click.echo(f"{r['label']}:")
            for i, p in enumerate(r["points"]):
                c = p["best_config"] or {}
                mark = "  <- switch" if i in r["switches"] else ""
                click.echo(f"  {p['value']:<10g} optimum {p['best_s']:.4f} s ({c.get('placement')}, "
                           f"{c.get('pp_schedule')}, {c.get('dp_flavour')})   nominal optimum {p['nominal_best_s']:.4f} s"
                           + mark)
        click.echo(f"wrote {d['file']}")
    _emit(data, as_json, human)


@click.command()
@click.option("--study-name", "study_name", required=True)
@click.option("--storage", default=None, help="the study's SQLAlchemy URL (default sqlite:///autotune.db)")
@params_option
@click.option("--out", "out_html", default="report.html", help="the HTML file to write")
@click.option("--json", "as_json", is_flag=True)
def report(study_name, storage, params_file, out_html, as_json):
    """A static HTML report of a stored study (figures embedded): convergence, top 10, breakdowns,
    the best configuration explained against the baselines, its pipeline timeline."""
    from .htmlreport import write_study_report
    from .study import DEFAULT_STORAGE
    _check_file_target(out_html, "--out", ("html", "htm"))
    seconds = write_study_report(storage or DEFAULT_STORAGE, study_name, out_html, _params(params_file))
    _emit({"file": out_html, "seconds": seconds}, as_json, lambda d: click.echo(f"wrote {d['file']} in {d['seconds']:.1f} s"))


@click.command()
@click.option("--study-name", "study_name", required=True)
@click.option("--storage", default=None, help="the study's SQLAlchemy URL (default sqlite:///autotune.db)")
@click.option("--json", "as_json", is_flag=True)
def importance(study_name, storage, as_json):
    """Which knobs explain a study's iteration time: Optuna's fANOVA importance over the measured
    configurations' real knob values (tp: 8, placement: pp_out), not the sampler's encoded indices."""
    from .extras import require
    from .study import DEFAULT_STORAGE, load_study_scenario, open_storage
    from .study.importance import knob_importances
    require("importance", "importance", study_name)
    import optuna
    storage = storage or DEFAULT_STORAGE
    load_study_scenario(storage, study_name)          # a missing study: one line naming it
    study = optuna.load_study(study_name=study_name, storage=open_storage(storage))
    try:
        imp = knob_importances(study)
    except ValueError as e:
        raise UserInputError("--study-name", study_name, f"a study with enough varied, feasible trials ({e})") from None
    data = {"study": study_name, "objective": (study.metric_names or ["iteration_time_s"])[0], "importance": imp}

    def human(d):
        click.echo(f"importance of each knob for {d['objective']} (fANOVA over real knob values):")
        for k, v in d["importance"].items():
            click.echo(f"  {k:<18} {v:6.3f}  {'#' * round(40 * v)}")
    _emit(data, as_json, human)


MAX_TIMELINE_OPS = 16_384
"""Most forward, backward and weight-gradient ops ``timeline`` simulates and draws: about a minute of
the event simulator on this project's 2-core machine (pp 32 with 128 micro-batches, 12,288 ops,
took 45 s), and more blocks than a figure can show."""


@click.command()
@scenario_options
@click.option("--config", "config_text", required=True, help='"tp=8,pp=8,pp_schedule=zbv,..." or a YAML file')
@params_option
@click.option("--out", "out_png", default="timeline.png", help="the PNG to write")
@click.option("--json", "as_json", is_flag=True)
def timeline(config_text, params_file, out_png, as_json, **kw):
    """The event simulator's pipeline schedule of one configuration as a picture: ranks as rows,
    forward / backward / weight-gradient blocks, waits (red: across buildings)."""
    from .configparse import make_config, parse_config_text
    from .space import SearchSpace
    from .timeline import timeline as run_timeline
    from .timeline import timeline_plot
    params, scen = _params(params_file), _scenario(kw)
    cfg = make_config(parse_config_text(config_text), scen.n_gpus)
    SearchSpace(scen).check(cfg)
    _check_image_target(out_png, "--out")
    ops = cfg.pp * cfg.pp_chunks * 3 * (scen.workload.global_batch_seqs // (cfg.dp * cfg.micro_batch))
    if ops > MAX_TIMELINE_OPS:
        raise UserInputError("--config", config_text, f"a pipeline of at most {MAX_TIMELINE_OPS:,} ops to draw "
                             f"(stages x chunks x 3 x micro-batches; this one has {ops:,}: a smaller --global-batch "
                             "or a larger micro_batch)")
    if not as_json:
        click.echo(f"simulating every op of {cfg.pp} stages (event-level; grows about quadratically with the "
                   "micro-batches: minutes for hundreds) ...", err=True)
    tl = run_timeline(scen, cfg, params)
    timeline_plot(tl, out_png)
    data = tl.to_dict() | {"file": out_png} | _header(scen)

    def human(d):
        click.echo(f"{d['schedule']}: pp {d['pp']}, {d['micro_batches']} micro-batches, step pipeline "
                   f"{d['makespan_s']:.4f} s")
        for r, (b, x) in enumerate(zip(d["bubble_s"], d["xb_wait_s"])):
            click.echo(f"  rank {r:<3} bubble {b:.4f} s (waiting across buildings {x:.4f} s)")
        click.echo(f"wrote {d['file']}")
    _emit(data, as_json, human)
