"""``autotune propose``: a learned agent's one-shot proposal for a scenario, without a study
(issue 16, item 3); ``cli.py`` registers it.

The PPO policy answers in one forward pass: its deterministic action is the zero-shot proposal;
``--samples N`` adds N - 1 draws from the policy and reports the best of all N beside it. Each
proposal is evaluated by the cost model (``--params``); ``--gap`` also runs the exact search and
states each proposal's gap to the optimum, so a user sees at once how far the one-shot answer is."""
from __future__ import annotations

import click

from .cli_common import (UserInputError, _emit, _header, _params, _print_evaluation, _print_header, _scenario,
                         params_option, scenario_options)

MAX_SAMPLES = 256


@click.command()
@scenario_options
@click.option("--strategy", type=click.Choice(["ppo"]), default="ppo", show_default=True,
              help="the learned agent that proposes")
@click.option("--policy", default=None, help="policy file (default: the shipped policy)")
@click.option("--samples", type=int, default=1, show_default=True,
              help=f"proposals: the deterministic one, then samples of the policy (1 to {MAX_SAMPLES})")
@click.option("--gap/--no-gap", "with_gap", default=True, show_default=True,
              help="run the exact search too and give each proposal's gap to the optimum")
@params_option
@click.option("--json", "as_json", is_flag=True)
def propose(strategy, policy, samples, with_gap, params_file, as_json, **kw):
    """The policy's one-shot proposal for a scenario (no study, no baselines first), evaluated,
    with its gap to the exact optimum."""
    from .extras import require
    require("rl", "--strategy", strategy)
    if not 1 <= samples <= MAX_SAMPLES:
        raise UserInputError("--samples", samples, f"an integer from 1 to {MAX_SAMPLES}")
    params, scen = _params(params_file), _scenario(kw)
    from .agents.ppo import DEFAULT_POLICY, propose_for
    from .costmodel import evaluate
    from .launch import config_text
    from .space import SearchSpace
    space = SearchSpace(scen).require_legal()
    configs = propose_for(scen, space, samples, policy)
    evals = [evaluate(scen, c, params, check=False) for c in configs]
    data = _header(scen) | {"strategy": strategy, "policy": str(policy or DEFAULT_POLICY), "samples": samples,
                            "proposals": [{"rank": i, "config_text": config_text(c), **e.to_dict()}
                                          for i, (c, e) in enumerate(zip(configs, evals))]}
    feasible = [i for i, e in enumerate(evals) if e.feasible]
    data["first"] = data["proposals"][0]
    data["best_of_samples"] = (min(feasible, key=lambda i: evals[i].iteration_time_s) if feasible else None)
    if with_gap:
        from .strategies import exhaustive_search
        res = exhaustive_search(space, params, top_k=1)
        opt = res.top[0][1] if res.top else None
        data["optimum_s"] = opt
        for p, e in zip(data["proposals"], evals):
            p["gap_pct"] = (100.0 * (e.iteration_time_s / opt - 1.0)) if (opt and e.feasible) else None

    def human(d):
        _print_header(d)
        first = d["first"]
        click.echo(f"{d['strategy']} one-shot proposal: {first['config_text']}")
        _print_evaluation(first)
        if d.get("optimum_s") is not None:
            gap = first.get("gap_pct")
            click.echo(f"exact optimum {d['optimum_s']:.4f} s; gap of the one-shot proposal: "
                       + (f"{gap:.2f}%" if gap is not None else "infeasible (does not fit in memory)"))
        elif "optimum_s" in d:
            click.echo("no configuration of this scenario fits in memory: no gap to give")
        if d["samples"] > 1:
            b = d["best_of_samples"]
            if b is None:
                click.echo(f"none of the {d['samples']} proposals fits in memory")
            else:
                p = d["proposals"][b]
                gap = f", gap {p['gap_pct']:.2f}%" if p.get("gap_pct") is not None else ""
                click.echo(f"best of {d['samples']} proposals (#{b}): {p['iteration_time_s']:.4f} s{gap}: "
                           f"{p['config_text']}")
    _emit(data, as_json, human)
