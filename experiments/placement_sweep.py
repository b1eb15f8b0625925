"""Placement sweep: best DP-out vs best PP-out across cross-building oversubscription and distance.

    python experiments/placement_sweep.py                 # configs/placement.yaml, cuts (~8 min, 2 cores)
    python experiments/placement_sweep.py --grid          # the full oversubscription x distance map
    python experiments/placement_sweep.py --reduced       # the CI-sized version

Each design point runs the exhaustive search twice over (once per placement, every other knob
free) and records both optima, their breakdowns and the cross-building bytes. ``pp_gain_pct`` =
best DP-out time / best PP-out time - 1: positive where PP-out wins. The flips table lists where
the winner changes along each cut.
"""
from __future__ import annotations

from pathlib import Path

from autotune.analysis import best_by
from autotune.sweep import flips, main_guard, plot_cuts, sweep_script, write_outputs


def measure(point) -> dict:
    best = best_by(point.scenario(), ("placement",), where={"placement": ("dp_out", "pp_out")})
    dp, pp = best.get(("dp_out",)), best.get(("pp_out",))
    row = point.label() | {"axis": point.axis}
    row["dp_out_s"] = dp.iteration_time_s if dp else None
    row["pp_out_s"] = pp.iteration_time_s if pp else None
    ok = dp is not None and pp is not None and dp.feasible and pp.feasible
    row["pp_gain_pct"] = 100 * (dp.iteration_time_s / pp.iteration_time_s - 1) if ok else None
    row["winner"] = ("pp_out" if row["pp_gain_pct"] > 0 else "dp_out") if ok else None
    row["dp_out_xb_GB"] = dp.xb_bytes_per_step / 1e9 if dp else None
    row["pp_out_xb_GB"] = pp.xb_bytes_per_step / 1e9 if pp else None
    row["detail"] = {k[0]: v.to_dict() for k, v in best.items()}
    return row


def main():
    run, rows = sweep_script(__doc__, "experiments/configs/placement.yaml", measure)
    args, cfg, out, stem = run.args, run.config, run.out, run.stem
    plots = [plot_cuts(rows, list(cfg.cuts), "pp_gain_pct", out / f"{stem}.png",
                       "best DP-out / best PP-out - 1 (%)")] if cfg.cuts else []
    cols = ["model", "cluster", *dict.fromkeys(k for r in rows for k in r if k in ("oversub", "distance_km")),
            "dp_out_s", "pp_out_s", "pp_gain_pct", "winner", "dp_out_xb_GB", "pp_out_xb_GB"]
    found = [f for axis in cfg.cuts for f in flips(rows, axis, "pp_gain_pct")]
    data = write_outputs(out, stem, rows, cols, {"flips": found}, plots, args.tracking_uri, not args.no_track,
                         {"config": args.config, "reduced": args.reduced})
    print(Path(data["table"]).read_text())
    print("flips:", found or "none")


if __name__ == "__main__":
    main_guard(main)
