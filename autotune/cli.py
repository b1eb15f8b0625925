"""The ``autotune`` command line: parse, call the library, print (human or --json)."""
from __future__ import annotations

import os
import sys

import click

from .cli_common import (EXIT_SERVICE_UNAVAILABLE, EXIT_USER_ERROR, STRICT_FLOAT, STRICT_INT, _emit, _header, _params,
                         _print_evaluation, _print_header, _scenario, params_option, scenario_options)
from .cli_explain import explain, importance, report, sensitivity, timeline
from .cli_propose import propose
from .errors import ServiceUnavailable, StorageCorrupt, UserInputError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="autotune", prog_name="autotune")
def cli():
    """autotune: find the fastest scale-across training configuration, and show why."""


@cli.command()
@scenario_options
@click.option("--config", "config_text", required=True, help='"tp=8,pp=16,placement=dp_out,..." or a YAML file')
@click.option("--simulate", is_flag=True, help="also run the event-level pipeline simulator")
@params_option
@click.option("--json", "as_json", is_flag=True)
def evaluate(config_text, simulate, params_file, as_json, **kw):
    """Iteration time and breakdown of one configuration."""
    from .configparse import make_config, parse_config_text
    from .costmodel import evaluate as evaluate_one
    from .space import SearchSpace
    params = _params(params_file)
    scen = _scenario(kw)
    cfg = make_config(parse_config_text(config_text), scen.n_gpus)
    SearchSpace(scen).check(cfg)
    ev = evaluate_one(scen, cfg, params, check=False)      # checked just above
    from .launch import config_text as pasteable, launch_summary
    data = ev.to_dict() | _header(scen) | {"launch": launch_summary(cfg, scen, params), "config_text": pasteable(cfg)}
    if simulate:
        from .costmodel.simulator import simulate as sim
        if not as_json:
            click.echo(f"simulating every micro-batch of {cfg.pp} stages "
                       "(event-level; large pipelines take a minute) ...", err=True)
        data["simulated"] = sim(scen, cfg, params)

    def human(d):
        _print_header(d)
        click.echo(f"config:   {d['config_text']}")
        _print_evaluation(d)
        _print_launch(d["launch"])
        if "simulated" in d:
            click.echo(f"  simulated iteration: {d['simulated']['iteration_time_s']:.4f} s")
    _emit(data, as_json, human)


@cli.command()
@scenario_options
@click.option("--knobs", is_flag=True, help="also list each knob's legal values and the rule that restricts it")
@click.option("--json", "as_json", is_flag=True)
def space(knobs, as_json, **kw):
    """Size of the configuration space and how much of it is legal."""
    from .space import SearchSpace
    scen = _scenario(kw)
    sp = SearchSpace(scen).require_legal()
    data = sp.summary() | _header(scen)
    if knobs:
        from .describe import knob_values
        data["knobs"] = knob_values(sp)

    def human(d):
        _print_header(d)
        click.echo(f"raw product of knob values: {d['raw_size']:,}")
        click.echo(f"legal configurations:       {d['legal_count']:,} ({100 * d['legal_fraction']:.3f}%)")
        for name, k in d.get("knobs", {}).items():
            click.echo(f"  {name:<18} {', '.join(map(str, k['values']))}")
            if k["rule"]:
                click.echo(f"  {'':<18} rule: {k['rule']}")
    _emit(data, as_json, human)


@cli.command()
@click.argument("preset", required=False)
@click.option("--json", "as_json", is_flag=True)
def show(preset, as_json):
    """A preset's numbers (model, cluster or GPU by name); without a name, every preset's name."""
    from .specs.presets import preset_names
    if preset is None:
        data = {k: preset_names(k) for k in ("models", "clusters", "hardware")}

        def human(d):
            for k, names in d.items():
                click.echo(f"{k}: {', '.join(names)}")
        _emit(data, as_json, human)
        return
    from .describe import preset_report
    data = preset_report(preset)

    def human(d):
        import yaml
        click.echo(f"{d['kind']} preset {d['name']}")
        click.echo(yaml.safe_dump(d["spec"], sort_keys=False).rstrip())
        for k, v in d.get("derived", {}).items():
            if isinstance(v, list):
                click.echo(f"{k}:")
                for line in v:
                    click.echo(f"  {line}")
            else:
                click.echo(f"{k}: {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k}: {v}")
    _emit(data, as_json, human)


@cli.command()
@scenario_options
@click.option("--top", "top_k", type=STRICT_INT, default=1, show_default=True,
              help="keep the K fastest configurations (exact, ties in enumeration order)")
@click.option("--out", "out_dir", default=None,
              help="folder to write the launch files into: best_config.yaml, torchtitan_args.txt (torchtitan 0.3.0), "
                   "megatron_args.txt, nccl.env, top_k.csv, scenario.yaml")
@click.option("--space", "space_name", type=click.Choice(["default", "full"]), default="default", show_default=True,
              help="knob grid: full opens every transport knob (all NCCL protocols, 2-32 channels, 1-16 MiB "
                   "buffers, DP buckets 0/25/100 MiB; 45x the default)")
@click.option("--workers", type=STRICT_INT, default=None,
              help="processes for the exact search [default: all cores on a space of 67M or more]")
@click.option("--robust", "robust", multiple=True, metavar="RANGE|FILE",
              help="a link field that varies over a run, cluster.<tier>.<field>=LOW..HIGH (e.g. "
                   "cluster.cross_building.loss_rate=1e-6..1e-3), or a YAML file of them: also find the "
                   "configuration with the best expected (or worst-case) time over seeded samples, exactly")
@click.option("--robust-samples", type=STRICT_INT, default=16, show_default=True, help="samples of the ranges")
@click.option("--robust-objective", type=click.Choice(["mean", "worst"]), default="mean", show_default=True)
@click.option("--robust-seed", type=STRICT_INT, default=0, show_default=True)
@params_option
@click.option("--json", "as_json", is_flag=True)
def search(top_k, out_dir, space_name, workers, robust, robust_samples, robust_objective, robust_seed, params_file,
           as_json, **kw):
    """Exhaustive search of the whole legal space: the optimum and why (with --robust, also the
    optimum of the expected or worst-case time when a link varies)."""
    from tqdm import tqdm

    from .costmodel import evaluate as evaluate_one
    from .launch import check_out_dir, config_text, launch_summary, write_launch_dir
    from .space import SPACE_PRESETS, SearchSpace
    from .strategies import exhaustive_search
    if not 1 <= top_k <= MAX_TOP_K:
        raise UserInputError("--top", top_k, f"an integer from 1 to {MAX_TOP_K}")
    if workers is not None and not 1 <= workers <= MAX_JOBS:
        raise UserInputError("--workers", workers, f"an integer from 1 to {MAX_JOBS}")
    params = _params(params_file)
    scen = _scenario(kw)
    space = SearchSpace(scen, **SPACE_PRESETS[space_name]).require_legal()
    if top_k > space.legal_count():
        raise UserInputError("--top", top_k, f"at most the legal count of this space ({space.legal_count():,})")
    ranges = None
    if robust:
        from .robust import parse_ranges
        if not 2 <= robust_samples <= MAX_ROBUST_SAMPLES:
            raise UserInputError("--robust-samples", robust_samples, f"an integer from 2 to {MAX_ROBUST_SAMPLES}")
        ranges = parse_ranges(robust, scen)           # every range checked before any work
    if out_dir is not None:
        check_out_dir(out_dir)
    with tqdm(total=space.legal_count(), unit="cfg", unit_scale=True, disable=as_json or not sys.stderr.isatty(),
              desc="exhaustive") as bar:
        res = exhaustive_search(space, params, progress=bar.update, top_k=top_k, workers=workers)
    top = [(c, evaluate_one(scen, c, params, check=False)) for c, _ in res.top]
    data = _header(scen) | {"legal_count": res.legal_count, "feasible_count": res.feasible_count,
            "elapsed_s": res.elapsed_s, "evaluated_count": res.evaluated_count,
            "pruned_fraction": res.pruned_fraction, "best": top[0][1].to_dict() if top else None,
            "top": [{"rank": i, "config_text": config_text(c), **e.to_dict()} for i, (c, e) in enumerate(top, 1)]}
    if top:
        data["best"]["launch"] = launch_summary(top[0][0], scen, params)
        data["best"]["config_text"] = config_text(top[0][0])
        if out_dir is not None:
            data["files"] = write_launch_dir(out_dir, scen, top, "autotune search " + " ".join(sys.argv[2:]))
    if top:
        from .analysis import leave_slow_out
        alone = leave_slow_out(scen, res.best_iteration_time_s, params, SPACE_PRESETS[space_name])
        if alone is not None:
            data["fastest_buildings_only"] = alone
    if ranges is not None:
        from .robust import robust_search
        from .specs.config import Config
        data["robust"] = robust_search(scen, ranges, robust_samples, robust_objective, robust_seed, params,
                                       space_options=SPACE_PRESETS[space_name])
        data["robust"]["robust_config_text"] = config_text(Config(**data["robust"]["robust_config"]))

    def human(d):
        _print_header(d)
        click.echo(f"searched {d['legal_count']:,} legal configurations ({d['feasible_count']:,} fit in memory) "
                   f"in {d['elapsed_s']:.2f} s; {d['evaluated_count']:,} evaluated in full, "
                   f"{100 * d['pruned_fraction']:.1f}% proved out by memory or the lower bound")
        b = d["best"]
        if b is None:
            click.echo("no configuration fits in memory")
            return
        click.echo(f"best: {b['config_text']}")
        _print_evaluation(b)
        _print_launch(b["launch"])
        if len(d["top"]) > 1:
            click.echo(f"top {len(d['top'])}:")
            for r in d["top"]:
                click.echo(f"  {r['rank']:>3}  {r['iteration_time_s']:.4f} s  {r['config_text']}")
        if "fastest_buildings_only" in d:
            _print_leave_out(d["fastest_buildings_only"], b["iteration_time_s"])
        if "robust" in d:
            _print_robust(d["robust"])
        for f in d.get("files", []):
            click.echo(f"wrote {f}")
    _emit(data, as_json, human)


def _print_leave_out(r: dict, best_s: float) -> None:
    head = f"fastest buildings alone ({r['buildings']} buildings, {r['gpus']:,} GPUs, same global batch):"
    if r["iteration_time_s"] is None:
        click.echo(f"{head} no legal configuration ({r.get('why_none', 'none fits in memory')})")
        return
    gain = r["every_building_gain_pct"]
    verdict = (f"they take {gain:.1f}% longer than every building" if gain >= 0 else
               f"every building takes {100 * (best_s / r['iteration_time_s'] - 1):.1f}% longer: leave the slow "
               "buildings out")
    from .launch import config_text
    from .specs.config import Config
    click.echo(f"{head} {r['iteration_time_s']:.4f} s; {verdict}")
    click.echo(f"  {config_text(Config(**r['config']))}")


def _print_robust(r: dict) -> None:
    what = "expected" if r["objective"] == "mean" else "worst-case"
    ranges = ", ".join(f"{x['path']} {x['low']:g}..{x['high']:g}" for x in r["ranges"])
    click.echo(f"robust ({what} time over {len(r['samples'])} samples of {ranges}, seed {r['seed']}"
               f"{', exact' if r['exact'] else ', NOT proven exact: top K reached its limit'}):")
    click.echo(f"  robust optimum  {r['robust_s']:.4f} s  {r['robust_config_text']}")
    if r["same_config"]:
        click.echo("  the nominal optimum is also the robust one (regret 0)")
    else:
        click.echo(f"  nominal optimum {r['nominal_s']:.4f} s under the samples ({r['nominal_at_spec_s']:.4f} s at the spec): "
                   f"regret {r['nominal_regret_s']:.4f} s ({r['nominal_regret_pct']:.2f}%)")


MAX_ROBUST_SAMPLES = 256
"""Largest --robust-samples: each sample is one exact search."""
MAX_BENCH_ROWS = 1 << 22
"""Largest --rows of bench: the sampled batch takes about 170 bytes per row (~0.7 GB)."""
MAX_TRIALS = 10_000_000
"""Largest --trials / --budget: a budget beyond it is a typo, not a study."""
MAX_SEEDS = 1000
"""Largest compare --seeds."""
MAX_JOBS = 1024
"""Largest --jobs: processes beyond the machine's CPUs only add start-up cost."""
MAX_TOP_K = 1000
"""Largest --top: each kept configuration is evaluated again for its breakdown."""


def _print_launch(launch: dict) -> None:
    click.echo("  launch: " + " ".join(f"{k}={v}" for k, v in launch["nccl_env"].items()))
    for n in launch["notes"]:
        click.echo(f"          {n}")


def _study_options(f):
    opts = [
        click.option("--trials", type=STRICT_INT, default=None,
                     help="finished trials this run adds to the study, as Optuna's n_trials (default 100 "
                          "unless --until is given)"),
        click.option("--until", type=STRICT_INT, default=None,
                     help="run until the study holds this many finished trials (interrupted ones not counted)"),
        click.option("--storage", default=None, help="SQLAlchemy URL (default sqlite:///autotune.db)"),
        click.option("--study-name", "study_name", default=None),
        click.option("--tracking-uri", "tracking_uri", default=None, help="MLflow URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db; the experiment is $MLFLOW_EXPERIMENT_NAME, else autotune)"),
        click.option("--backend", default="costmodel", help="measurement backend (entry points: autotune.backends)"),
        click.option("--backend-option", "backend_options", multiple=True,
                     help="key=value passed to the backend, e.g. template='srun ./train.sh {torchtitan_args}'"),
        click.option("--trial-timeout", "trial_timeout", type=STRICT_FLOAT, default=None, help="seconds per trial"),
        click.option("--no-tracking", is_flag=True, help="do not log to MLflow"),
        click.option("--experiment-name", "experiment", default=None,
                     help="MLflow experiment (default: $MLFLOW_EXPERIMENT_NAME, else autotune); stored with the study"),
        click.option("--objectives", default="iteration_time_s",
                     help="comma-separated: iteration_time_s[,xb_bytes_per_step][,memory_per_gpu_bytes]"),
        click.option("--infeasible", type=click.Choice(["fail", "constraint"]), default="fail",
                     help="out-of-memory trials: failed with reason, or an Optuna constraint"),
        click.option("--json", "as_json", is_flag=True),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _print_study(d):
    if d.get("note"):
        click.echo(d["note"])
    click.echo(f"study {d['study_name']} ({d['strategy']}) in {d['storage']}: {d['n_trials']} trials, "
               f"{d['n_trials_this_run']} this run ({d['n_failed']} failed, {d['n_infeasible']} out of memory) "
               f"in {d['elapsed_s']:.1f} s")
    if d["best_config"] is None:
        click.echo("no feasible configuration found")
        return
    click.echo("best: " + ",".join(f"{k}={v}" for k, v in d["best_config"].items()))
    click.echo(f"iteration {d['best_iteration_time_s']:.4f} s")
    for name in ("production", "sota"):
        t, sp = d[f"{name}_iteration_time_s"], d[f"speedup_vs_{name}"]
        if t is not None:
            click.echo(f"  vs {name:<10} {t:.4f} s  speedup {100 * sp:+.1f}%")
    if d.get("pareto_front"):
        click.echo(f"Pareto front over {', '.join(d['objectives'])}: {len(d['pareto_front'])} configurations")
        for p in d["pareto_front"][:10]:
            click.echo("  " + "  ".join(f"{k}={v:.4g}" for k, v in p["objectives"].items()) + "  "
                       + ",".join(f"{k}={v}" for k, v in p["config"].items()))
    if d.get("mlflow_run_id"):
        click.echo(f"MLflow run {d['mlflow_run_id']}")
    for e in d.get("tracking_errors") or []:
        click.echo(f"tracking error: {e}", err=True)


SCENARIO_PARAMS = ("model", "cluster", "gpus", "global_batch", "seq_len", "precision", "scenario_file", "overrides")


def _given(name: str) -> bool:
    """Whether an option was given (on the command line), not left at its default."""
    src = click.get_current_context().get_parameter_source(name)
    return src not in (None, click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)


def _scenario_or_stored(kw, study_name):
    """The scenario given by the options, or None (the stored study's) when none of them is given
    and a study is named: a resume or a worker reads its scenario from the study."""
    if study_name and not any(kw.get(k) for k in SCENARIO_PARAMS):
        for k in SCENARIO_PARAMS:
            kw.pop(k, None)
        return None
    return _scenario(kw)


def _objectives(text):
    """Comma-separated objective names; an empty entry is refused (check_objectives names the rest)."""
    if text is None:
        return None
    names = tuple(o.strip() for o in text.split(","))
    if any(not o for o in names):
        raise UserInputError("--objectives", text, "comma-separated objective names, none empty")
    return names


@cli.command()
@scenario_options
@click.option("--strategy", default="tpe",
              help="tpe, cmaes, gp, nsga2, random, exhaustive, guided, ppo, production, sota")
@click.option("--strategy-option", "strategy_options", multiple=True, metavar="KEY=VALUE",
              help="a strategy's option (guided: batch, pool, prior_weight, stop_within)")
@click.option("--seed", type=STRICT_INT, default=0)
@click.option("--out", "out_dir", default=None,
              help="folder for the launch files of the best configuration and the top 10 (as `search --out`; the "
                   "breakdowns are the cost model's, the rank and measured_s the backend's)")
@params_option
@_study_options
def study(strategy, strategy_options, seed, out_dir, params_file, trials, until, storage, study_name, tracking_uri, backend,
          backend_options, trial_timeout, no_tracking, experiment, objectives, infeasible, as_json, **kw):
    """Run or resume a tuning study; every trial goes to the storage and to MLflow.

    A resume (an existing --study-name) uses the study's stored options for those it is not
    given (the scenario too), and refuses one given with another value."""
    from .study import StudyRunner
    backend_options = _backend_options(backend_options)
    if params_file is not None:
        if _given("backend") and backend != "costmodel":
            raise UserInputError("--params", params_file, "only with --backend costmodel (a real backend measures)")
        _params(params_file)                               # a bad file fails here, before anything is written
        backend_options["params"] = params_file
    scen = _scenario_or_stored(kw, study_name)
    runner = StudyRunner(scen, strategy=strategy if _given("strategy") else None, trials=trials, until=until,
                         storage=storage,
                         study_name=study_name, tracking_uri=tracking_uri, seed=seed,
                         backend=backend if _given("backend") else None,
                         backend_options=backend_options or None, trial_timeout_s=trial_timeout,
                         track=not no_tracking, progress=not as_json and sys.stderr.isatty(), experiment=experiment,
                         infeasible=infeasible if _given("infeasible") else None,
                         objectives=_objectives(objectives) if _given("objectives") else None,
                         strategy_options=_backend_options(strategy_options, "--strategy-option") or None)
    if out_dir is not None:
        from .launch import check_out_dir
        check_out_dir(out_dir)
    data = runner.run() | _header(runner.scenario)
    if out_dir is not None and data["top"]:
        from .costmodel import evaluate as evaluate_one
        from .launch import write_launch_dir
        from .specs.config import Config
        top = [Config(**t["config"]) for t in data["top"]]
        params = _params(params_file)
        data["files"] = write_launch_dir(out_dir, runner.scenario, [(c, evaluate_one(runner.scenario, c, params,
                                                                                     check=False)) for c in top],
                                         "autotune study " + " ".join(sys.argv[2:]),
                                         measured_s=[t["iteration_time_s"] for t in data["top"]],
                                         backend=runner.backend_name)

    def human(d):
        _print_header(d)
        _print_study(d)
        for f in d.get("files", []):
            click.echo(f"wrote {f}")
    _emit(data, as_json, human)


def _backend_options(items, option: str = "--backend-option") -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserInputError(option, item, "key=value")
        out[key.strip()] = value
    return out


@cli.command()
@scenario_options
@click.option("--study-name", "study_name", required=True)
@click.option("--storage", default=None, help="the shared study's SQLAlchemy URL")
@click.option("--trials", type=STRICT_INT, default=None,
              help="finished trials this worker adds (default 100 unless --until is given)")
@click.option("--until", type=STRICT_INT, default=None,
              help="run until the shared study holds this many finished trials")
@click.option("--seed", type=STRICT_INT, default=None, help="default: derived from the process id")
@click.option("--strategy", default=None, help="default: the study's (another one is refused)")
@click.option("--objectives", default=None, help="default: the study's (others are refused)")
@click.option("--infeasible", type=click.Choice(["fail", "constraint"]), default=None,
              help="default: the study's (another mode is refused)")
@click.option("--tracking-uri", "tracking_uri", default=None, help="default: the study's")
@click.option("--backend", default=None, help="default: the study's (another one is refused)")
@click.option("--backend-option", "backend_options", multiple=True,
              help="key=value passed to the backend; default: the study's (another value is refused)")
@click.option("--trial-timeout", "trial_timeout", type=STRICT_FLOAT, default=None)
@click.option("--no-tracking", is_flag=True)
@click.option("--experiment-name", "experiment", default=None, help="default: the study's")
@click.option("--json", "as_json", is_flag=True)
def worker(study_name, storage, trials, until, seed, strategy, objectives, infeasible, tracking_uri, backend,
           backend_options, trial_timeout, no_tracking, experiment, as_json, **kw):
    """Join an existing study (same storage) and add --trials trials to it (or run --until it holds N).

    Everything that defines the study (scenario, strategy, objectives, infeasible handling,
    backend and its options, tracking URI) is read from the study; an option given with another
    value than the study's is refused (exit 2), before anything is written."""
    import os

    from .study import StudyRunner
    scen = _scenario_or_stored(kw, study_name)
    runner = StudyRunner(scen, strategy=strategy, trials=trials, until=until, storage=storage,
                         study_name=study_name, tracking_uri=tracking_uri,
                         seed=seed if seed is not None else os.getpid(),
                         backend=backend, backend_options=_backend_options(backend_options) or None,
                         trial_timeout_s=trial_timeout, track=not no_tracking, infeasible=infeasible,
                         objectives=_objectives(objectives), join=True, experiment=experiment,
                         progress=not as_json and sys.stderr.isatty())
    _emit(runner.run(), as_json, _print_study)


@cli.command()
@scenario_options
@click.option("--strategies", default="tpe,random", help="comma-separated strategy names")
@click.option("--budget", type=STRICT_INT, default=300, help="trials per strategy and seed")
@click.option("--seeds", type=STRICT_INT, default=5)
@click.option("--out", "out_dir", default="compare-out",
              help="parent folder: each comparison writes its own subfolder (table, PNG, JSON and the launch files of "
                   "the exhaustive optimum)")
@click.option("--seed-baselines", is_flag=True, help="start every study from production and sota (as `study` does)")
@params_option
@click.option("--tracking-uri", "tracking_uri", default=None)
@click.option("--no-tracking", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
def compare(strategies, budget, seeds, out_dir, seed_baselines, params_file, tracking_uri, no_tracking, as_json, **kw):
    """Strategies x seeds at a fixed budget, judged against the exhaustive optimum."""
    from .compare import run_compare
    if not 1 <= budget <= MAX_TRIALS:
        raise UserInputError("--budget", budget, f"an integer from 1 to {MAX_TRIALS:,}")
    if not 1 <= seeds <= MAX_SEEDS:
        raise UserInputError("--seeds", seeds, f"an integer from 1 to {MAX_SEEDS}")
    names = [s.strip() for s in strategies.split(",")]
    if not strategies.strip() or any(not s for s in names):
        raise UserInputError("--strategies", strategies, "comma-separated strategy names, none empty (e.g. tpe,random)")
    scen = _scenario(kw)
    data = run_compare(scen, names, budget, seeds, out_dir,
                       tracking_uri=None if no_tracking else tracking_uri, track=not no_tracking,
                       progress=not as_json and sys.stderr.isatty(), seed_baselines=seed_baselines,
                       params_file=params_file)

    def human(d):
        click.echo(f"{d['scenario']['model']} x {d['scenario']['cluster']}: exhaustive optimum "
                   f"{d['optimum_s']:.4f} s over {d['legal_count']:,} legal configurations")
        click.echo(f"{'strategy':<12} {'median gap %':>12} {'trials to 1%':>13} {'trials to 5%':>13}")
        for name, r in d["strategies"].items():
            t1 = "-" if r["median_trials_to_1pct"] is None else f"{r['median_trials_to_1pct']:.0f}"
            t5 = "-" if r["median_trials_to_5pct"] is None else f"{r['median_trials_to_5pct']:.0f}"
            click.echo(f"{name:<12} {r['median_gap_pct']:>12.2f} {t1:>13} {t5:>13}")
        for k, g in d["baseline_gaps_pct"].items():
            click.echo(f"{k} baseline gap: {g:.2f}%")
        click.echo(f"plot: {d['plot']}  table: {d['table']}")
        click.echo(f"launch files of the optimum: {os.path.dirname(d['launch_files'][0])}")
    _emit(data, as_json, human)


@cli.command()
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
    from .validation import default_jobs, fit_params, loso as run_loso, one_line, write_params
    from .validation import validate as run_validation
    if jobs < 0:
        raise UserInputError("--jobs", jobs, "0 (one per CPU) or a positive number of processes")
    if jobs > MAX_JOBS:
        raise UserInputError("--jobs", jobs, f"at most {MAX_JOBS} processes")
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

    def skipped_and_ignored(d):
        for s in d["skipped"]:
            click.echo(f"{s['row']:4d} SKIPPED {s['model_name'][:34]}: row {s['row']} (line {s['line']}): "
                       f"{s['reason']}")
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
        ranks(d, "held out", "in-sample")
    _emit(data, as_json, human_loso if loso else human)


@cli.command()
@click.option("--data", "data_path", default=None, help="folder with gpu_kernels.csv and gpu_layers.csv "
              "(default: the shipped H100 measurements)")
@click.option("--fit", is_flag=True, help="also fit the kernel parameters on a seeded half of each kind's cases "
              "and score the other half")
@click.option("--json", "as_json", is_flag=True)
def kernels(data_path, fit, as_json):
    """The cost model's kernel terms (GEMM, expert GEMM, attention, memory-bound, whole layers)
    against kernels measured on one H100, per kind."""
    from .kernelcheck import run as run_kernels
    if fit:
        from .extras import require
        require("fit", "--fit", True)
    data = run_kernels(data_path, fit)

    def table(title, section):
        click.echo(title)
        click.echo(f"  {'kind':<22} {'n':>4} {'median |err|':>13} {'p90 |err|':>10} {'median err':>11}")
        for kind, st in section["by_kind"].items():
            click.echo(f"  {kind:<22} {st['n']:>4} {st['median_abs_err_pct']:>12.1f}% {st['p90_abs_err_pct']:>9.1f}% "
                       f"{st['median_signed_err_pct']:>+10.1f}%")

    def human(d):
        click.echo(f"{d['cases']} measured cases on {d['gpu']}; err = predicted / measured - 1 (+: model slower)")
        table("shipped calibration (fit on published training runs):", d["shipped"])
        if "kernel_fit" in d:
            kf = d["kernel_fit"]
            click.echo("kernel fit: " + ", ".join(f"{k}={v:.3g}" for k, v in kf["params"].items()))
            table(f"kernel fit on {kf['fit_cases']} cases, scored on the {kf['held_out_cases']} held out:", kf)
        for kind, why in d["not_modelled"].items():
            click.echo(f"not modelled: {kind}: {why}")
        for line in d["skipped"]:
            click.echo(f"skipped {line}")
    _emit(data, as_json, human)


@cli.command()
@click.option("--rows", type=STRICT_INT, default=1 << 18, help="configurations in the batch timing")
@click.option("--json", "as_json", is_flag=True)
def bench(rows, as_json):
    """Cost-model speed on llama3-405b x campus-5bldg (the largest preset space)."""
    from .bench import run_bench
    if not 1 <= rows <= MAX_BENCH_ROWS:
        raise UserInputError("--rows", rows, f"an integer from 1 to {MAX_BENCH_ROWS} (2**22)")
    data = run_bench(rows)

    def human(d):
        for k, v in d.items():
            click.echo(f"{k:<22} {v}")
    _emit(data, as_json, human)


@cli.command()
@scenario_options
@click.option("--backend", default="local-torch", help="a backend that measures for real (local-torch, command, plugins)")
@click.option("--backend-option", "backend_options", multiple=True, help="key=value passed to the backend")
@click.option("--xb-mbit", "xb_mbit", default="50,200",
              help="cross-building rates (Mbit/s) to measure at; local-torch shapes its emulated link to each")
@click.option("--configs", "n_configs", type=STRICT_INT, default=14, help="configurations in the designed set")
@click.option("--holdout", type=STRICT_FLOAT, default=0.33, help="fraction of configurations held out of the fit")
@click.option("--seed", type=STRICT_INT, default=0)
@click.option("--out", "out_path", default="calibrated-scenario.yaml", help="scenario file to write")
@click.option("--json", "as_json", is_flag=True)
def calibrate(backend, backend_options, xb_mbit, n_configs, holdout, seed, out_path, as_json, **kw):
    """Measure a designed set of configurations, fit the cost model to them, score held-out ones."""
    from .backends import get_backend
    from .calibrate import calibrate as run_calibration
    from .calibrate import write_scenario
    from .extras import require
    require("fit", "autotune calibrate", "(fits the network parameters)")
    scen = _scenario(kw)
    try:
        rates = [float(x) for x in xb_mbit.split(",") if x.strip()]
    except ValueError:
        raise UserInputError("--xb-mbit", xb_mbit, "comma-separated numbers (Mbit/s)") from None
    if not rates or min(rates) <= 0:
        raise UserInputError("--xb-mbit", xb_mbit, "one or more positive rates")
    if n_configs < 6:
        raise UserInputError("--configs", n_configs, "at least 6")
    if not 0.1 <= holdout <= 0.6:
        raise UserInputError("--holdout", holdout, "a fraction between 0.1 and 0.6")
    opts = _backend_options(backend_options)
    probe = get_backend(backend, **opts)              # a bad backend or option fails before any run
    semantics = getattr(probe, "workload_semantics", None) or {}
    if semantics:                                     # model what the backend's workload really does
        scen = scen.model_copy(update={"workload": scen.workload.model_copy(update=semantics)})
    can_run = getattr(probe, "can_run", None)
    runnable = (lambda cfg: can_run(scen, cfg)) if can_run else None

    calibration_options = getattr(probe, "calibration_options", None)   # e.g. shape the link to each rate

    def factory(rate):
        return get_backend(backend, **(calibration_options(opts, rate, scen.cluster.n_buildings)
                                       if calibration_options else opts))
    bar = None
    if not as_json and sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=n_configs * len(rates), desc="calibrate", unit="run")
    res = run_calibration(scen, factory, rates, n_configs, holdout, seed, runnable, bar.update if bar else None)
    if bar:
        bar.close()
    res.scenario_file = write_scenario(scen, res.params, rates[0], out_path)
    data = res.to_dict()

    def human(d):
        if semantics:
            click.echo("workload as the backend runs it: " + ", ".join(f"{k}={v}" for k, v in semantics.items()))
        click.echo("fitted: " + ", ".join(f"{k}={v:.4g}" for k, v in d["params"].items()))
        click.echo(f"held-out ({d['n_holdout']} runs): Spearman {d['spearman_holdout']:.3f}, "
                   f"median APE {d['mape_holdout_pct']:.1f}%   (fit runs: median APE {d['mape_fit_pct']:.1f}%)")
        for f in d["failed_rows"]:
            click.echo(f"failed run (left out): {f['config']['placement']} {f['config']['dp_flavour']} "
                       f"pp={f['config']['pp']} at {f['xb_mbit']:g} Mbit/s: {f['reason'][:200]}")
        click.echo(f"scenario file: {d['scenario_file']}  (use with --scenario)")
    _emit(data, as_json, human)


for _command in (explain, timeline, sensitivity, report, importance):      # why a configuration wins: cli_explain.py
    cli.add_command(_command)
cli.add_command(propose)                                                   # a learned agent's one-shot answer


def main(argv=None) -> int:
    """Entry point: user mistakes become one line on stderr and exit code 2."""
    try:
        cli.main(args=argv, prog_name="autotune", standalone_mode=False)
    except UserInputError as e:
        click.echo(f"autotune: error: {e}", err=True)
        return EXIT_USER_ERROR
    except (ServiceUnavailable, StorageCorrupt) as e:
        click.echo(f"autotune: error: {e}", err=True)
        return EXIT_SERVICE_UNAVAILABLE
    except click.exceptions.NoArgsIsHelpError as e:
        click.echo(e.format_message() if hasattr(e, "format_message") else str(e), err=True)
        return EXIT_USER_ERROR
    except click.UsageError as e:
        msg = " ".join(e.format_message().split())
        click.echo(f"autotune: error: {msg}", err=True)
        return EXIT_USER_ERROR
    except click.Abort:
        click.echo("autotune: aborted", err=True)
        return 130
    except click.exceptions.Exit as e:
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
