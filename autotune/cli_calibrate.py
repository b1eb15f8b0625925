"""``autotune calibrate``: measure a designed set of configurations on a real backend and fit the
cost model to them."""
from __future__ import annotations

import sys

import click

from .cli_common import SEED, STRICT_FLOAT, STRICT_INT, _backend_options, _check_file_target, _emit, _scenario, scenario_options
from .errors import UserInputError


@click.command()
@scenario_options
@click.option("--backend", default="local-torch", help="a backend that measures for real (local-torch, command, plugins)")
@click.option("--backend-option", "backend_options", multiple=True, help="key=value passed to the backend")
@click.option("--xb-mbit", "xb_mbit", default="50,200",
              help="cross-building rates (Mbit/s) to measure at; local-torch shapes its emulated link to each")
@click.option("--configs", "n_configs", type=STRICT_INT, default=14, help="configurations in the designed set")
@click.option("--holdout", type=STRICT_FLOAT, default=0.33, help="fraction of configurations held out of the fit")
@click.option("--seed", type=SEED, default=0)
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
    _check_file_target(out_path, "--out", ("yaml", "yml"))            # before minutes of measuring, not after
    try:
        rates = [STRICT_FLOAT.convert(x, None, None) for x in xb_mbit.split(",")]
    except click.BadParameter:
        raise UserInputError("--xb-mbit", xb_mbit, "comma-separated finite numbers written with the digits 0-9 "
                             "(Mbit/s)") from None
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
        scen = scen.with_workload(**semantics)
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
