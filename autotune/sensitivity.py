"""How the verdict moves when the cross-building link is worse (or better) than its spec sheet:
the exact optimum recomputed (``exhaustive_search``) at each point of a sweep along one axis of the
cross-building tier (bandwidth, distance, loss), beside the nominal optimum's own time there, with
the points where the optimum switches placement, schedule or data-parallel flavour marked."""
from __future__ import annotations

import math

from .errors import UserInputError, rule_of
from .space import SearchSpace

AXES = {
    "bandwidth": ("bandwidth_Bps", (0.125, 0.25, 0.5, 1.0, 2.0), "cross-building bandwidth (x nominal)"),
    "distance": ("distance_km", (0.0, 10.0, 50.0, 200.0, 1000.0, 2000.0), "cross-building distance (km)"),
    "loss": ("loss_rate", (0.0, 1e-6, 1e-5, 1e-4, 1e-3), "cross-building packet loss rate"),
}
"""Axis -> (the cross_building field it sets, default points, label). Bandwidth points multiply the
nominal bandwidth; the others are absolute values."""
SWITCH_KNOBS = ("placement", "pp_schedule", "dp_flavour")
"""A change of any of these between neighbouring points is marked as a switch of the optimum."""


def _at(scenario, field: str, value: float):
    c = scenario.cluster
    tier = type(c.cross_building).model_validate({**c.cross_building.model_dump(), field: value})
    return scenario.model_copy(update={"cluster": c.model_copy(update={"cross_building": tier})})


def sweep(scenario, axis: str, values=None, params=None, nominal=None) -> dict:
    """The exact optimum at each point of ``axis`` (module docstring). ``nominal``: the scenario's
    own optimum when the caller has it already (several axes of one scenario)."""
    from .costmodel import evaluate
    from .strategies.exhaustive import exhaustive_search
    if axis not in AXES:
        raise UserInputError("--axis", axis, "one of " + ", ".join(AXES))
    if scenario.cluster.n_buildings < 2:
        raise UserInputError("--cluster", scenario.cluster.name, "a cluster of two or more buildings (the sweep "
                                                                   "moves the cross-building link)")
    field, default, label = AXES[axis]
    values = tuple(default if values is None else values)
    if nominal is None:
        nominal = exhaustive_search(SearchSpace(scenario).require_legal(), params).best_config
        if nominal is None:
            raise UserInputError("--model", scenario.model.name, "a scenario where some legal configuration fits "
                                                               "in memory (none does: more GPUs or a smaller model)")
    base = getattr(scenario.cluster.cross_building, field)
    points = []
    for v in values:
        x = base * v if axis == "bandwidth" else v
        try:
            s = _at(scenario, field, x)
        except Exception as e:  # noqa: BLE001 - pydantic rejects a value out of the tier's bounds
            raise UserInputError("--values", v, f"values the cross_building {field} accepts: {rule_of(e)}") from None
        res = exhaustive_search(SearchSpace(s).require_legal(), params)
        nom = evaluate(s, nominal, params, check=False)      # (memory does not depend on the link's bandwidth, latency or loss)
        points.append({"value": v, "best_s": res.best_iteration_time_s,
                       "best_config": res.best_config.model_dump() if res.best_config else None,
                       "nominal_best_s": nom.iteration_time_s if nom.feasible else math.nan})
    switches = [i for i in range(1, len(points)) if points[i]["best_config"] and points[i - 1]["best_config"]
                and any(points[i]["best_config"][k] != points[i - 1]["best_config"][k] for k in SWITCH_KNOBS)]
    return {"axis": axis, "field": field, "label": label, "nominal_config": nominal.model_dump(),
            "points": points, "switches": switches}


def sensitivity_plot(results: list[dict], path, title: str = "") -> None:
    """One panel per axis: the optimum's time and the nominal optimum's time; switches marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.8), squeeze=False)
    for ax, r in zip(axes[0], results):
        xs = [p["value"] for p in r["points"]]
        ax.plot(xs, [p["best_s"] for p in r["points"]], "o-", label="optimum at this point")
        ax.plot(xs, [p["nominal_best_s"] for p in r["points"]], "s--", label="nominal optimum")
        for i in r["switches"]:
            c = r["points"][i]["best_config"]
            ax.axvline(xs[i], ls=":", color="tab:red")
            ax.annotate(f"{c['placement']}\n{c['pp_schedule']}\n{c['dp_flavour']}", (xs[i], r["points"][i]["best_s"]),
                        fontsize=7, color="tab:red")
        if r["axis"] == "bandwidth":
            ax.set_xscale("log", base=2)
        elif r["axis"] == "loss":
            ax.set_xscale("symlog", linthresh=min([x for x in xs if x > 0] or [1.0]))
        ax.set_xlabel(r["label"])
        ax.set_ylabel("iteration time (s)")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
