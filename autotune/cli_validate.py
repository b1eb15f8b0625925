"""``autotune validate`` and ``autotune kernels``: the cost model against measured runs and kernels."""
from __future__ import annotations

import json
import sys

import click

from .cli_common import MAX_JOBS, STRICT_INT, _check_file_target, _emit, _params, given, params_option
from .errors import UserInputError


@click.command()
@click.option("--runs", default=None, help="CSV with the columns of published_runs.csv (default: the shipped "
              "published runs); 'reserved': the shipped independent check, runs no fit has seen (score only)")
@click.option("--fit", is_flag=True, help="refit the efficiency parameters on these runs first")
@click.option("--write", "write_path", default=None, help="with --fit: write the parameters to this YAML")
@click.option("--loso", is_flag=True, help="leave-one-source-family-out: for each source family, fit on the other "
              "families' rows and score the held-out family's rows (each row scored once, by a fit that never saw it)")
@click.option("--jobs", type=STRICT_INT, default=0, help="with --loso: fits run in this many processes (0 = one per CPU)")
@params_option
@click.option("--json", "as_json", is_flag=True)
def validate(runs, fit, write_path, loso, jobs, params_file, as_json):
    """Error of the cost model on measured runs, row by row (in-sample, or held out by source family)."""
    from .validation import one_line
    from .validation.runs_file import NoScoreableRows
    if jobs < 0:
        raise UserInputError("--jobs", jobs, "0 (one per CPU) or a positive number of processes")
    if jobs > MAX_JOBS:
        raise UserInputError("--jobs", jobs, f"at most {MAX_JOBS} processes")
    if given("jobs") and not loso:
        raise UserInputError("--jobs", jobs, "only with --loso (the one command that fits in parallel)")
    if runs is not None and not runs.strip():
        raise UserInputError("--runs", runs, "a CSV file path, or 'reserved' (leave --runs out for the shipped "
                             "published runs)")
    if write_path is not None and not fit and not loso:
        raise UserInputError("--write", write_path, "only with --fit (it writes the fitted parameters)")
    if write_path and fit:
        _check_file_target(write_path, "--write", ("yaml", "yml"))
    if fit or loso:
        from .extras import require
        require("fit", "--loso" if loso else "--fit", True)
    if runs == "reserved":
        if fit or loso:
            raise UserInputError("--runs", runs, "scored only: the reserved runs are the independent check that "
                                 "no fit may see (drop --fit / --loso)")
        from .validation import reserved_runs_path
        runs = str(reserved_runs_path())
    if params_file is not None and (fit or loso):
        raise UserInputError("--params", params_file, "not with --fit or --loso (they fit the parameters); "
                             "alone it scores the runs with the file's parameters")
    try:
        data = _validation_data(runs, fit, write_path, loso, jobs, params_file, as_json)
    except NoScoreableRows as e:       # every row's reason on stdout, then the one-line error (exit 2)
        click.echo(json.dumps({"n": 0, "skipped": e.skipped}, indent=2) if as_json
                   else "\n".join(_skip_line(s) for s in e.skipped))
        raise

    def pct(v):
        return "   -" if v is None else f"{v:5.1f}%"

    def rho(v):
        return "  n/a" if v is None else f"{v:+.2f}"

    def ranks(d, label, compare_label=None):
        rc = d["rank_correlation"]
        click.echo(f"rank correlation ({label}): Spearman rho of predicted vs measured, per configuration group "
                   "(one source family, same model architecture, GPU and metric, >= 3 rows, >= 2 layouts)")
        head = f"  {'family':<28} {'model':<18} {'gpu':<10} {'n':>3} {'meas. spread':>12} {'rho':>6}"
        click.echo(head + (f" {compare_label:>10}" if compare_label else "") + "  varies")
        for g in rc["groups"]:
            line = (f"  {g['family'][:28]:<28} {g['model'][:18]:<18} {g['gpu'][:10]:<10} {g['n']:>3} "
                    f"{g['measured_spread_pct']:>11.1f}% {rho(g['spearman']):>6}")
            if compare_label:
                line += f" {rho(g.get('spearman_compare')):>10}"
            click.echo(line + "  " + ",".join(g["varies"]))
        click.echo(f"  min rho {rho(rc['min_spearman'])} over {rc['n_groups']} groups"
                   + (f" ({rc['n_undefined']} undefined: constant values)" if rc["n_undefined"] else "")
                   + (f"; mean {rho(rc['mean_spearman'])}" if rc["mean_spearman"] is not None else ""))

    def subsets(d, label=""):
        for s in d.get("subsets", ()):
            if s["rows"]:
                click.echo(f"{'  ' if label else ''}{s['subset']}, {s['rows']} rows{', ' + label if label else ''}: "
                           f"median {s['median_ape']:.2f}%, p90 {s['p90_ape']:.2f}%")

    def skipped_and_ignored(d):
        for s in d["skipped"]:
            click.echo(_skip_line(s))
        if d["ignored_columns"]:
            click.echo("ignored columns (not columns of published_runs.csv): " + ", ".join(d["ignored_columns"]))

    def human(d):
        for r in d["rows"]:
            click.echo(f"{r['row']:4d} {one_line(r['model_name'], 34):<34} {r['measured_metric']:<22} "
                       f"measured {r['measured']:>10.2f}  predicted {r['predicted']:>10.2f}  APE {r['ape']:5.1f}%")
            if r.get("assumptions"):
                click.echo("       assumed: " + "; ".join(r["assumptions"]))
        skipped_and_ignored(d)
        click.echo(f"n={d['n']} scored, {len(d['skipped'])} skipped; median APE {d['median_ape']:.2f}%, "
                   f"90th percentile {d['p90_ape']:.2f}%")
        mem = d.get("memory") or {}
        if mem.get("n"):
            click.echo(f"memory: {mem['n']} rows with a measured peak; predicted vs measured median |error| "
                       f"{mem['median_ape']:.1f}%, 90th percentile {mem['p90_ape']:.1f}%")
        oom = mem.get("out_of_memory_rows") or []
        if oom:
            click.echo(f"memory: {len(oom)} of {d['n']} runs that ran as published are out of memory in the model "
                       f"(rows {', '.join(map(str, oom))}): scored all the same")
        subsets(d)
        ranks(d, "in-sample")

    def human_loso(d):
        skipped_and_ignored(d)
        click.echo(f"leave-one-source-family-out: {d['n_families']} families, {d['n']} rows scored "
                   f"({len(d['skipped'])} skipped); each row predicted by the fit on the other families")
        click.echo(f"  {'held-out family':<44} {'rows':>4} {'fit rows':>8} {'median':>7} {'p90':>7} "
                   f"{'in-sample':>10} {'shipped':>8}")
        for f in d["families"]:
            click.echo(f"  {f['family'][:44]:<44} {f['rows']:>4} {f['fit_rows']:>8} {pct(f['median_ape']):>7} "
                       f"{pct(f['p90_ape']):>7} {pct(f['in_sample_median_ape']):>10} {pct(f['shipped_median_ape']):>8}")
        i, s = d["in_sample"], d["shipped"]
        click.echo(f"  {'all rows, held out (each row once)':<44} {d['n']:>4} {'':>8} {pct(d['median_ape']):>7} "
                   f"{pct(d['p90_ape']):>7} {pct(i['median_ape']):>10} {pct(s['median_ape']):>8}")
        click.echo(f"  in-sample (the same fit on all rows): median {i['median_ape']:.2f}%, p90 {i['p90_ape']:.2f}%; "
                   f"shipped calibration: median {s['median_ape']:.2f}%, p90 {s['p90_ape']:.2f}%")
        click.echo(f"  held out: median {d['median_ape']:.2f}%, p90 {d['p90_ape']:.2f}%  "
                   f"({d['seconds']:.0f} s, {d['jobs']} process(es))")
        subsets(d, "held out")
        ranks(d, "held out", "in-sample")
    _emit(data, as_json, human_loso if loso else human)


@click.command()
@click.option("--data", "data_path", default=None, help="folder with gpu_kernels.csv and gpu_layers.csv, or "
              "a shipped one: h100 (the default) or h200")
@click.option("--fit", is_flag=True, help="also fit the kernel parameters on a seeded half of each kind's cases "
              "and score the other half")
@click.option("--free-knee", is_flag=True, help="with --fit: fit the GEMM knee's sharpness too (held at the "
              "shipped value otherwise; validation.held.KERNEL_SHAPES says why)")
@click.option("--gpu", "gpu_preset", default=None, help="hardware preset the measurements ran on (default: the "
              "GPU named in the folder's gpu_info.txt, else h100-sxm)")
@click.option("--json", "as_json", is_flag=True)
def kernels(data_path, fit, free_knee, gpu_preset, as_json):
    """The cost model's kernel terms (GEMM, expert GEMM, attention, memory-bound, whole layers)
    against kernels measured on one GPU, per kind: the shipped H100 measurements by default, or
    another folder (the shipped H200 ones, never fit on: --data h200)."""
    from .kernelcheck import run as run_kernels
    if free_knee and not fit:
        raise UserInputError("--free-knee", True, "only with --fit (it frees the knee in the kernel fit)")
    if data_path is not None and not data_path.strip():
        raise UserInputError("--data", data_path, "a folder with gpu_kernels.csv and gpu_layers.csv, or h100 or "
                             "h200 (leave --data out for h100)")
    if fit:
        from .extras import require
        require("fit", "--fit", True)
    data = run_kernels(data_path, fit, free_knee, gpu_preset)
    for section in (data["shipped"], data.get("kernel_fit") or {}):
        for kind, st in section.get("by_kind", {}).items():
            st["target_pct"] = kernel_target_pct(kind)
            st["meets_target"] = None if st["target_pct"] is None else st["median_abs_err_pct"] <= st["target_pct"]

    def table(title, section):
        click.echo(title)
        click.echo(f"  {'kind':<22} {'n':>4} {'median |err|':>13} {'p90 |err|':>10} {'median err':>11}  target (median)")
        for kind, st in section["by_kind"].items():
            target = "-" if st["target_pct"] is None else (f"<= {st['target_pct']:.0f}%: "
                                                           + ("met" if st["meets_target"] else "MISSED"))
            click.echo(f"  {kind:<22} {st['n']:>4} {st['median_abs_err_pct']:>12.1f}% {st['p90_abs_err_pct']:>9.1f}% "
                       f"{st['median_signed_err_pct']:>+10.1f}%  {target}")

    def human(d):
        click.echo(f"{d['cases']} measured cases on {d['gpu']}; err = predicted / measured - 1 (+: model slower)")
        table("shipped calibration (fit on published training runs):", d["shipped"])
        sr = d["shipped"]["split_ratio"]
        if sr:
            click.echo(f"  TP-overlap split alone, chunks / whole GEMM ({sr['n']} cases, chunks >= {1e3 * sr['min_chunk_ms']:.0f} us each): "
                       f"median |err| {sr['median_abs_err_pct']:.1f}%, p90 {sr['p90_abs_err_pct']:.1f}%, "
                       f"median err {sr['median_signed_err_pct']:+.1f}%")
        if "kernel_fit" in d:
            kf = d["kernel_fit"]
            click.echo("kernel fit: " + ", ".join(f"{k}={v:.3g}" for k, v in kf["params"].items()))
            table(f"kernel fit on {kf['fit_cases']} cases, scored on the {kf['held_out_cases']} held out:", kf)
        for kind, why in d["not_modelled"].items():
            click.echo(f"not modelled: {kind}: {why}")
        for line in d["skipped"]:
            click.echo(f"skipped {line}")
    _emit(data, as_json, human)


@click.command()
@click.option("--measure", is_flag=True, help="measure the grid again on this machine (local CPU processes, "
              "a minute or two) instead of reading the shipped measurements")
@click.option("--data", "data_path", default=None, help="measurements written by --write (default: the shipped "
              "autotune/data/workload_memory.csv)")
@click.option("--write", "write_path", default=None, help="with --measure: save the measurements to this CSV")
@click.option("--json", "as_json", is_flag=True)
def memory(measure, data_path, write_path, as_json):
    """The memory model against the reference workload's measured peak memory, per DP flavour
    and pipeline schedule (predicted vs the largest rank's peak of live tensors)."""
    from . import memcheck
    if write_path and not measure:
        raise UserInputError("--write", write_path, "only with --measure (it saves new measurements)")
    if write_path:
        _check_file_target(write_path, "--write", ("csv",))
    if measure and data_path:
        raise UserInputError("--data", data_path, "not with --measure (which measures the grid itself)")
    if measure:
        rows = memcheck.grid()
        bar = None
        if not as_json and sys.stderr.isatty():
            from tqdm import tqdm
            bar = tqdm(total=len(rows), desc="measure", unit="run")
        try:
            rows = memcheck.measure(rows, progress=bar.update if bar else None)
        except memcheck.MeasurementFailed as e:
            raise click.ClickException(str(e)) from None
        finally:
            if bar:
                bar.close()
        if write_path:
            memcheck.write(rows, write_path)
    else:
        rows = memcheck.load(data_path)
    data = memcheck.compare(rows)

    def line(name, st):
        if st is None:              # no row of that kind in the file
            return
        click.echo(f"  {name:<34} {st['n']:>3} {st['median_abs_err_pct']:>8.1f}% {st['p90_abs_err_pct']:>7.1f}% "
                   f"{st['max_abs_err_pct']:>7.1f}%")

    def human(d):
        click.echo(f"{memcheck.MODEL} on {memcheck.CLUSTER} ranks (torch {d['rows'][0]['torch']}, "
                   f"{d['rows'][0]['machine']}); err = predicted / measured peak - 1")
        click.echo(f"  {'configuration':<40} {'measured':>9} {'predicted':>9} {'err':>7}")
        for r in d["rows"]:
            click.echo(f"  {r['case']:<40} {r['measured_peak_bytes'] / 1e6:>7.1f}MB {r['predicted_bytes'] / 1e6:>7.1f}MB "
                       f"{r['err_pct']:>+6.1f}%")
        click.echo(f"  {'|err| by DP flavour (pp 1, GPipe, 1F1B)':<34}   n   median     p90     max")
        for fl, st in d["by_flavour"].items():
            line(fl, st)
        line("all of them", d["paper_schedules"])
        for sc, st in d["other_schedules"].items():
            line(f"{sc} (torch's schedule)", st)
    _emit(data, as_json, human)


def _skip_line(s: dict) -> str:
    return f"{s['row']:4d} SKIPPED {s['model_name'][:34]}: row {s['row']} (line {s['line']}): {s['reason']}"


def _validation_data(runs, fit, write_path, loso, jobs, params_file, as_json) -> dict:
    """What ``validate`` prints: the runs scored held out (--loso), by a refit (--fit) or by the
    shipped or given parameters."""
    from .validation import default_jobs, fit_params, loso as run_loso, write_params
    from .validation import validate as run_validation
    if loso:
        if fit or write_path:
            raise UserInputError("--fit" if fit else "--write", write_path if write_path else True,
                                 "not with --loso (it fits once per held-out family; use --fit --write alone "
                                 "to write a calibration)")
        data = run_loso(runs, jobs=jobs or default_jobs(), progress=not as_json and sys.stderr.isatty())
    else:
        params = _params(params_file)
        if fit:
            params, report = fit_params(runs)
            if write_path:
                write_params(params, write_path, report)
        data = run_validation(runs, params)
    return data


KERNEL_TARGETS_PCT = {"expert_bmm": 15.0, "expert_grouped_mm_up": 15.0, "layer_fwd_bwd": 15.0}
"""Issue 13's targets for ``autotune kernels``, median |error| per kind: 10% (this default), expert
GEMMs and a whole layer's forward+backward 15%; a layer's forward alone and the TP-overlap chunks
(``gemm_chunks_*``, a check of the split ratio) have none."""


def kernel_target_pct(kind: str) -> float | None:
    if kind == "layer_fwd" or kind.startswith("gemm_chunks"):
        return None
    return KERNEL_TARGETS_PCT.get(kind, 10.0)
