"""``autotune propose``: a learned agent's one-shot proposal for a scenario, without a study
(issue 16, item 3); ``cli.py`` registers it.

The one-shot proposal is the fastest, by the shipped calibration (as a study's first PPO trial
and ``compare`` rank it), of the policy's deterministic action and ``--rank-draws`` draws of the
policy (``agents.ppo.ranked_proposal``; no real trial is spent choosing it; ``--rank-draws 0``
gives the raw action); the raw action is reported beside it. ``--params`` times them. ``--samples N`` adds N - 1 plain draws from the policy and reports the best
of all N. ``--gap`` also runs the exact search and states each proposal's gap to the optimum, so a
user sees at once how far the one-shot answer is."""
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
              help=f"proposals: the one-shot one, then plain samples of the policy (1 to {MAX_SAMPLES})")
@click.option("--gap/--no-gap", "with_gap", default=True, show_default=True,
              help="run the exact search too and give each proposal's gap to the optimum")
@click.option("--rank-draws", type=int, default=None,
              help="policy draws the one-shot proposal is chosen among by the cost model (default "
                   "agents.ppo.RANK_DRAWS, 256; 0: the policy's raw deterministic action)")
@params_option
@click.option("--json", "as_json", is_flag=True)
def propose(strategy, policy, samples, with_gap, rank_draws, params_file, as_json, **kw):
    """The policy's one-shot proposal for a scenario (no study, no baselines first), evaluated,
    with its gap to the exact optimum."""
    from .extras import require
    require("rl", "--strategy", strategy)
    if not 1 <= samples <= MAX_SAMPLES:
        raise UserInputError("--samples", samples, f"an integer from 1 to {MAX_SAMPLES}")
    from .agents.ppo import DEFAULT_POLICY, RANK_DRAWS, RANK_TEMPERATURE, load, propose as policy_samples, ranked_proposal
    from .agents.ppo_strategy import MAX_RANK_DRAWS
    rank_draws = RANK_DRAWS if rank_draws is None else rank_draws
    if not 0 <= rank_draws <= MAX_RANK_DRAWS:
        raise UserInputError("--rank-draws", rank_draws, f"an integer from 0 to {MAX_RANK_DRAWS}")
    params, scen = _params(params_file), _scenario(kw)
    from .costmodel import evaluate
    from .envs.design_points import make_point
    from .launch import config_text
    from .space import SearchSpace
    space = SearchSpace(scen).require_legal()
    model, point = load(policy or DEFAULT_POLICY), make_point(scen, space)
    first, info = ranked_proposal(model, point, rank_draws)
    configs = [first] + policy_samples(model, point, n=samples, seed=0)[1:]
    evals = [evaluate(scen, c, params, check=False) for c in configs]
    raw = evaluate(scen, info["deterministic"], params, check=False)
    data = _header(scen) | {"strategy": strategy, "policy": str(policy or DEFAULT_POLICY), "samples": samples,
                            "rank_draws": rank_draws, "temperature": RANK_TEMPERATURE,
                            "ranked_candidates": info["candidates"],
                            "policy_action": {"config_text": config_text(info["deterministic"]), **raw.to_dict()},
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
        for p, e in zip(data["proposals"] + [data["policy_action"]], evals + [raw]):
            p["gap_pct"] = (100.0 * (e.iteration_time_s / opt - 1.0)) if (opt and e.feasible) else None

    def human(d):
        _print_header(d)
        first = d["first"]
        how = (f"the fastest by the cost model of the policy's action and {d['rank_draws']} draws "
               f"({d['ranked_candidates']} distinct)") if d["rank_draws"] else "the policy's raw action"
        click.echo(f"{d['strategy']} one-shot proposal ({how}): {first['config_text']}")
        _print_evaluation(first)
        if d.get("optimum_s") is not None:
            gap = first.get("gap_pct")
            click.echo(f"exact optimum {d['optimum_s']:.4f} s; gap of the one-shot proposal: "
                       + (f"{gap:.2f}%" if gap is not None else "infeasible (does not fit in memory)"))
        elif "optimum_s" in d:
            click.echo("no configuration of this scenario fits in memory: no gap to give")
        if d["rank_draws"]:
            a = d["policy_action"]
            gap = f", gap {a['gap_pct']:.2f}%" if a.get("gap_pct") is not None else ""
            click.echo(f"the policy's raw action: {a['iteration_time_s']:.4f} s{gap}"
                       + ("" if a["feasible"] else " (does not fit in memory)") + f": {a['config_text']}")
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
