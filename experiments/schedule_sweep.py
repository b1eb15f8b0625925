"""Schedule sweep: DP flavour under DP-out and PP schedule under PP-out, against cross-building
latency (distance), bandwidth (oversubscription) and micro-batch count (global batch).

    python experiments/schedule_sweep.py              # configs/schedule.yaml (~3 min, 2 cores)
    python experiments/schedule_sweep.py --reduced    # the CI-sized version

For each design point one exhaustive pass groups the legal space by (placement, flavour,
schedule); the best DP-out time per flavour and the best PP-out time per schedule are the
minima over the other knobs. Columns are each group's time relative to the best of its family
(``+x%`` = x% slower than the family's winner).
"""
from __future__ import annotations

from pathlib import Path

from autotune.analysis import best_by
from autotune.specs.config import DP_FLAVOURS, PP_SCHEDULES
from autotune.sweep import main_guard, plot_cuts, sweep_script, write_outputs


def family_best(best: dict, placement: str, index: int, names) -> dict:
    """Minimum time per value of key[index] among the groups of one placement."""
    out = {}
    for key, g in best.items():
        if key[0] == placement and g.feasible:
            name = key[index]
            if name in names and (name not in out or g.iteration_time_s < out[name].iteration_time_s):
                out[name] = g
    return out


def measure(point) -> dict:
    best = best_by(point.scenario(), ("placement", "dp_flavour", "pp_schedule"),
                   where={"placement": ("dp_out", "pp_out")})
    row = point.label() | {"axis": point.axis}
    detail = {}
    for placement, index, names in (("dp_out", 1, DP_FLAVOURS), ("pp_out", 2, PP_SCHEDULES)):
        fam = family_best(best, placement, index, names)
        if not fam:
            continue
        top = min(g.iteration_time_s for g in fam.values())
        for name, g in fam.items():
            row[f"{placement}:{name}"] = 100 * (g.iteration_time_s / top - 1)
            detail[f"{placement}:{name}"] = g.to_dict()
        row[f"{placement}_best"] = min(fam, key=lambda n: fam[n].iteration_time_s)
        row[f"{placement}_best_s"] = top
    # edges the findings talk about (positive = the first schedule is faster)
    for a, b in (("zbv", "zb1p"), ("zbv", "zb2p"), ("interleaved_1f1b", "1f1b"), ("hsdp", "fsdp")):
        fam = family_best(best, "dp_out" if a == "hsdp" else "pp_out", 1 if a == "hsdp" else 2, (a, b))
        if a in fam and b in fam:
            row[f"edge {a}>{b} (%)"] = 100 * (fam[b].iteration_time_s / fam[a].iteration_time_s - 1)
    row["detail"] = detail
    return row


def main():
    run, rows = sweep_script(__doc__, "experiments/configs/schedule.yaml", measure)
    args, cfg, out, stem = run.args, run.config, run.out, run.stem
    plots = []
    for edge in ("edge zbv>zb1p (%)", "edge interleaved_1f1b>1f1b (%)", "edge hsdp>fsdp (%)"):
        name = edge.split()[1].replace(">", "_over_")
        if cfg.cuts:
            plots.append(plot_cuts(rows, list(cfg.cuts), edge, out / f"{stem}-{name}.png", edge))
    axes = [k for k in ("distance_km", "oversub", "batch_seqs") if any(k in r for r in rows)]
    cols = ["model", *axes, "dp_out_best", *[f"dp_out:{f}" for f in DP_FLAVOURS], "pp_out_best",
            *[f"pp_out:{s}" for s in PP_SCHEDULES], "edge zbv>zb1p (%)", "edge interleaved_1f1b>1f1b (%)",
            "edge hsdp>fsdp (%)"]
    data = write_outputs(out, stem, rows, cols, None, plots, args.tracking_uri, not args.no_track,
                         {"config": args.config, "reduced": args.reduced})
    print(Path(data["table"]).read_text())


if __name__ == "__main__":
    main_guard(main)
