"""The ``autotune`` command line: parse, call the library, print (human or --json)."""
from __future__ import annotations

import os
import sys

import click

from .cli_calibrate import calibrate
from .cli_common import (EXIT_BROKEN_PIPE, EXIT_SERVICE_UNAVAILABLE, EXIT_USER_ERROR, MAX_BENCH_ROWS, MAX_SEEDS,
                         MAX_TRIALS, STRICT_FLOAT, STRICT_INT, _backend_options, _emit, _header, _params,
                         _print_evaluation, _print_header, _objectives, _print_launch, _scenario, remove_unused_out,
                         given, params_option, scenario_options, stdout_closed)
from .cli_explain import explain, importance, report, sensitivity, timeline
from .cli_propose import propose
from .cli_search import search
from .cli_validate import kernels, memory, validate
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


def _scenario_or_stored(kw, study_name):
    """The scenario given by the options, or None (the stored study's) when none of them is given
    and a study is named: a resume or a worker reads its scenario from the study."""
    if study_name is not None and not study_name.strip():
        raise UserInputError("--study-name", study_name, "the name of a study (not empty)")
    if study_name and not any(kw.get(k) for k in SCENARIO_PARAMS):
        for k in SCENARIO_PARAMS:
            kw.pop(k, None)
        return None
    if study_name and not (kw.get("model") and kw.get("cluster")) and not kw.get("scenario_file"):
        k = next(k for k in SCENARIO_PARAMS if kw.get(k))
        raise UserInputError("--" + k.replace("_", "-"), kw[k], "with --study-name, the whole scenario (--model and "
                             "--cluster, or --scenario) to check against the study's, or no scenario option")
    return _scenario(kw)


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
        if given("backend") and backend != "costmodel":
            raise UserInputError("--params", params_file, "only with --backend costmodel (a real backend measures)")
        _params(params_file)                               # a bad file fails here, before anything is written
        backend_options["params"] = params_file
    scen = _scenario_or_stored(kw, study_name)
    runner = StudyRunner(scen, strategy=strategy if given("strategy") else None, trials=trials, until=until,
                         storage=storage,
                         study_name=study_name, tracking_uri=tracking_uri, seed=seed,
                         backend=backend if given("backend") else None,
                         backend_options=backend_options or None, trial_timeout_s=trial_timeout,
                         track=not no_tracking, progress=not as_json and sys.stderr.isatty(), experiment=experiment,
                         infeasible=infeasible if given("infeasible") else None,
                         objectives=_objectives(objectives) if given("objectives") else None,
                         strategy_options=_backend_options(strategy_options, "--strategy-option") or None)
    created = None
    if out_dir is not None:
        from .launch import check_out_dir
        created = check_out_dir(out_dir)
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
    if data["best_config"] is None and out_dir is not None:   # a study may have none yet: not a failure
        remove_unused_out(f"no feasible trial in this study yet ({data['n_trials']} trials)", out_dir, created)


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
    from .strategies.registry import NAMES as STRATEGY_NAMES
    for s in names:
        if s not in STRATEGY_NAMES or names.count(s) > 1:
            raise UserInputError("--strategies", s, "each once, among " + ", ".join(STRATEGY_NAMES))
    if no_tracking and tracking_uri is not None:
        from .masking import mask_uri
        raise UserInputError("--tracking-uri", mask_uri(tracking_uri), "not with --no-tracking (nothing is logged)")
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


for _command in (explain, timeline, sensitivity, report, importance):      # why a configuration wins: cli_explain.py
    cli.add_command(_command)
cli.add_command(propose)                                                   # a learned agent's one-shot answer
for _command in (search, validate, kernels, memory, calibrate):                     # cli_search.py, cli_validate.py, cli_calibrate.py
    cli.add_command(_command)


def main(argv=None) -> int:
    """Entry point: user mistakes become one line on stderr and exit code 2."""
    try:
        # standalone_mode=False: click returns a click.exceptions.Exit's code (exit_without_result)
        rv = cli.main(args=argv, prog_name="autotune", standalone_mode=False)
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
    except SystemExit as e:     # click exits 1 when the reader of stdout left (EPIPE): say nothing
        if e.code == 1 and stdout_closed():
            return EXIT_BROKEN_PIPE
        raise
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
