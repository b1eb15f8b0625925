"""Why one configuration is faster than the baselines (``autotune explain``).

For each baseline (production, naive, sota; ``autotune/baselines.py``): both breakdowns side by
side, the knobs that differ, and a one-factor-at-a-time attribution of the gap: each differing
factor is changed alone from the baseline to the explained configuration's value and the time it
saves is measured by the cost model; what the single changes do not explain is the interaction
remainder. By construction the savings plus the remainder equal the gap. A factor whose change
alone is illegal (the parallel degrees must still multiply to the GPU count, a schedule needs its
chunks) or does not fit in memory saves nothing alone: its effect is in the remainder, and the
row says why.

The parallel degrees (tp, cp, ep, pp, dp) move together as one factor, and the pipeline schedule
with its chunks: alone, one degree or one schedule without its chunk count is rarely legal.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .costmodel import evaluate
from .errors import UserInputError
from .space import SearchSpace
from .specs import Config, Scenario

FACTORS = (("degrees", ("tp", "cp", "ep", "etp", "pp", "dp")), ("placement", ("placement",)),
           ("dp_flavour", ("dp_flavour",)), ("pp_schedule", ("pp_schedule", "pp_chunks")),
           ("micro_batch", ("micro_batch",)), ("recompute", ("recompute",)), ("overlap_dp", ("overlap_dp",)),
           ("collective", ("collective",)), ("nccl_protocol", ("nccl_protocol",)),
           ("nccl_channels", ("nccl_channels",)), ("nccl_buffer_mib", ("nccl_buffer_mib",)),
           ("dp_bucket_mib", ("dp_bucket_mib",)), ("xb_load_balancing", ("xb_load_balancing",)),
           ("xb_queue_pairs", ("xb_queue_pairs",)), ("xb_loss_recovery", ("xb_loss_recovery",)))
"""The factors of the attribution, in the order they are listed (each is changed alone)."""


@dataclass
class Step:
    factor: str
    baseline: str             # the baseline's value(s), as text
    explained: str            # the explained configuration's value(s)
    saved_s: float            # time saved by this change alone (0 when it cannot be made alone)
    note: str = ""            # why it saves nothing alone (illegal, out of memory)


@dataclass
class Attribution:
    baseline: str
    baseline_s: float
    explained_s: float
    steps: list = field(default_factory=list)

    @property
    def gap_s(self) -> float:
        return self.baseline_s - self.explained_s

    @property
    def remainder_s(self) -> float:
        """The gap the single changes leave unexplained (interactions, and illegal single changes)."""
        return self.gap_s - sum(s.saved_s for s in self.steps)

    def to_dict(self) -> dict:
        return {"baseline": self.baseline, "baseline_s": self.baseline_s, "explained_s": self.explained_s,
                "gap_s": self.gap_s, "remainder_s": self.remainder_s,
                "steps": [s.__dict__ for s in self.steps]}


def _values(cfg: Config, fields) -> str:
    return ",".join(f"{f}={getattr(cfg, f)}" for f in fields)


def attribute(scenario: Scenario, space: SearchSpace, baseline: Config, target: Config, name: str,
              params=None) -> Attribution:
    """One-factor-at-a-time attribution of the gap from ``baseline`` to ``target`` (module docstring)."""
    t_base = evaluate(scenario, baseline, params, check=False).iteration_time_s
    t_target = evaluate(scenario, target, params, check=False).iteration_time_s
    att = Attribution(name, t_base, t_target)
    for factor, fields in FACTORS:
        if all(getattr(baseline, f) == getattr(target, f) for f in fields):
            continue
        step = Step(factor, _values(baseline, fields), _values(target, fields), 0.0)
        changed = baseline.model_copy(update={f: getattr(target, f) for f in fields})
        try:
            space.check(changed)
        except UserInputError as e:
            step.note = f"illegal alone ({e.field})"
            att.steps.append(step)
            continue
        ev = evaluate(scenario, changed, params, check=False)
        if not ev.feasible:
            step.note = "does not fit in memory alone"
        else:
            step.saved_s = t_base - ev.iteration_time_s
        att.steps.append(step)
    return att


def explain(scenario: Scenario, config: Config | None = None, params=None,
            baselines=("production", "naive", "sota")) -> dict:
    """The explained configuration (the exact optimum when none is given) against each baseline:
    breakdowns, differing knobs, attribution. An illegal ``config`` raises UserInputError; an
    infeasible one is explained with its reason (no attribution: it cannot run)."""
    from .strategies.exhaustive import exhaustive_search
    space = SearchSpace(scenario).require_legal()
    if config is None:
        config = exhaustive_search(space, params).best_config
        if config is None:
            raise UserInputError("--config", None, "a configuration to explain: no legal configuration of this "
                                                   "scenario fits in memory (give one with --config to see why)")
    else:
        space.check(config)
    ev = evaluate(scenario, config, params, check=False)
    out = {"config": config.model_dump(), "evaluation": ev.to_dict(), "baselines": {}}
    out["baselines"] = _baselines(scenario, space, config, ev, params, baselines)
    return out


def baselines_only(scenario: Scenario, params=None, baselines=("production", "naive", "sota")) -> dict:
    """The baselines' breakdowns alone (what can still be drawn when the configuration is illegal)."""
    space = SearchSpace(scenario).require_legal()
    return {"config": None, "evaluation": None, "baselines": _baselines(scenario, space, None, None, params,
                                                                          baselines)}


def _baselines(scenario, space, config, ev, params, baselines) -> dict:
    from .baselines import MAKERS
    out = {}
    for name in baselines:
        b = MAKERS[name](scenario, space)
        if b is None:
            out[name] = {"config": None, "reason": "no legal configuration follows this rule here"}
            continue
        be = evaluate(scenario, b, params, check=False)
        entry = {"config": b.model_dump(), "evaluation": be.to_dict()}
        if config is not None:
            entry["differs"] = {k: [getattr(b, k), getattr(config, k)] for k in Config.model_fields
                                if getattr(b, k) != getattr(config, k)}
            if be.feasible and ev.feasible:
                entry["attribution"] = attribute(scenario, space, b, config, name, params).to_dict()
        out[name] = entry
    return out


def explain_plot(data: dict, path, title: str = "") -> None:
    """Left: stacked breakdowns of the explained configuration and the baselines. Middle: their
    communication per network tier and dimension, exposed (solid) and hidden (hatched). Right: the
    attribution of the gap to the first baseline that has one, factor by factor, then the remainder."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .costmodel import BREAKDOWN_KEYS
    fig, (ax, axt, ax2) = plt.subplots(1, 3, figsize=(17, 4.8))
    evals = {"explained": data["evaluation"]} if data.get("evaluation") else {}
    evals.update({k: v["evaluation"] for k, v in data["baselines"].items() if v.get("evaluation")
                  and v["evaluation"]["feasible"]})
    bars = {k: e["breakdown"] for k, e in evals.items()}
    _tier_panel(axt, {k: e.get("tiers") or {} for k, e in evals.items()})
    names, bottom = list(bars), [0.0] * len(bars)
    for key in BREAKDOWN_KEYS:
        vals = [bars[n].get(key, 0.0) for n in names]
        ax.bar(names, vals, bottom=bottom, label=key.replace("_s", ""))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("seconds per iteration")
    ax.legend(fontsize=7)
    ax.set_title(title or "breakdown")
    att = next((v["attribution"] for v in data["baselines"].values() if v.get("attribution")), None)
    if att is not None:
        labels = [s["factor"] + (" *" if s["note"] else "") for s in att["steps"]] + ["interactions"]
        vals = [s["saved_s"] for s in att["steps"]] + [att["remainder_s"]]
        ax2.barh(labels, vals, color=["tab:green" if v >= 0 else "tab:red" for v in vals])
        ax2.invert_yaxis()
        ax2.axvline(0, color="k", lw=0.6)
        ax2.set_xlabel(f"seconds saved vs {att['baseline']} (gap {att['gap_s']:.3f} s; * = not alone)")
        ax2.set_title("one factor at a time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)



def _tier_panel(ax, tables: dict) -> None:
    """Stacked per configuration: each (tier, dimension) cell's exposed seconds, then its hidden
    seconds hatched above them (``costmodel.tiers``)."""
    from .costmodel.tiers import DIMS, TIERS
    names = list(tables)
    cells = [(t, d) for t in TIERS for d in DIMS
             if any((tables[n].get(d) or {}).get(t, {}).get("link_s", 0.0) > 0 for n in names)]
    colours = dict(zip(cells, __import__("matplotlib").colormaps["tab20"].colors))
    bottom = [0.0] * len(names)
    for part, style in (("exposed_s", {}), ("hidden_s", {"hatch": "//", "alpha": 0.45})):
        for cell in cells:
            t, d = cell
            vals = [tables[n][d][t][part] for n in names]
            ax.bar(names, vals, bottom=bottom, color=colours[cell], label=f"{t} {d}" if part == "exposed_s" else None,
                   **style)
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("seconds per iteration (hatched: hidden)")
    ax.set_title("communication per tier and dimension")
    if cells:
        ax.legend(fontsize=7)
