"""Network-layer sweep: ECMP with 1-16 queue pairs vs QP spraying vs packet spraying; go-back-N
vs selective repeat; per collective algorithm; against loss rate, distance and ECMP path count.

    python experiments/network_sweep.py              # configs/network.yaml (~3 min, 2 cores)
    python experiments/network_sweep.py --reduced    # the CI-sized version

One exhaustive pass per design point (restricted to the config's placement) groups the space by
(load balancing, queue pairs, loss recovery, collective); each column is the best time with that
choice, every other knob re-optimised, relative to the best overall (``+x%`` = x% slower).
Columns ``prod ...`` hold the parallelism at the production configuration with the hierarchical
collective (the ring is latency-bound across buildings, so its transport hardly matters) and
vary only the transport, relative to packet spraying with selective repeat (``prod gbn``:
go-back-N over selective repeat, both ECMP with 16 QPs): the transport's own effect, before
the tuner re-plans traffic off the cross-building link.
"""
from __future__ import annotations

from pathlib import Path

from autotune.analysis import best_by
from autotune.baselines import production_config
from autotune.costmodel import evaluate
from autotune.specs.config import COLLECTIVES, LOSS_RECOVERY
from autotune.sweep import main_guard, plot_cuts, sweep_script, write_outputs

GROUP = ("xb_load_balancing", "xb_queue_pairs", "xb_loss_recovery", "collective")
LB_COLUMNS = ("ecmp/1", "ecmp/2", "ecmp/4", "ecmp/8", "ecmp/16", "qp_spray/1", "qp_spray/16", "packet_spray/1")


def measure(point, placement: str = "dp_out") -> dict:
    best = best_by(point.scenario(), GROUP, where={"placement": (placement,)})
    top = min(g.iteration_time_s for g in best.values())
    row = point.label() | {"axis": point.axis, "best_s": top}

    def col(select):
        ts = [g.iteration_time_s for k, g in best.items() if select(k)]
        return 100 * (min(ts) / top - 1) if ts else None
    for c in LB_COLUMNS:
        lb, q = c.split("/")
        row[c] = col(lambda k: k[0] == lb and k[1] == int(q))
    for lr in LOSS_RECOVERY:
        row[lr] = col(lambda k: k[2] == lr)
    for c in COLLECTIVES:
        row[c] = col(lambda k: k[3] == c)
    # same load balancing / collective, loss recovery switched: what go-back-N costs over SR
    row["gbn_penalty_pct"] = None if row["gbn"] is None or row["sr"] is None else row["gbn"] - row["sr"]
    row["ecmp1_penalty_pct"] = row["ecmp/1"] - row["packet_spray/1"] if row["ecmp/1"] is not None else None
    # the same view with the parallelism held at the production configuration, where the
    # cross-building traffic cannot be re-planned away: the transport's own effect
    scen = point.scenario()
    prod = production_config(scen)
    if prod is not None:
        prod = prod.model_copy(update={"collective": "hierarchical"})
        base = evaluate(scen, prod.model_copy(update={"xb_load_balancing": "packet_spray", "xb_queue_pairs": 1,
                                                      "xb_loss_recovery": "sr"})).iteration_time_s
        for c in LB_COLUMNS:
            lb, q = c.split("/")
            t = evaluate(scen, prod.model_copy(update={"xb_load_balancing": lb, "xb_queue_pairs": int(q),
                                                       "xb_loss_recovery": "sr"})).iteration_time_s
            row[f"prod {c}"] = 100 * (t / base - 1)
        sr, gbn = (evaluate(scen, prod.model_copy(update={"xb_load_balancing": "ecmp", "xb_queue_pairs": 16,
                                                          "xb_loss_recovery": lr})).iteration_time_s
                   for lr in ("sr", "gbn"))
        row["prod gbn"] = 100 * (gbn / sr - 1)
    winner = min(best.values(), key=lambda g: g.iteration_time_s)
    row["best"] = "/".join(map(str, winner.key))
    return row


def placement_of(cfg) -> str:
    return cfg.options.get("placement", "dp_out")


def main():
    from functools import partial
    run, rows = sweep_script(__doc__, "experiments/configs/network.yaml", None,
                             lambda cfg: partial(measure, placement=placement_of(cfg)))
    args, cfg, out, stem = run.args, run.config, run.out, run.stem
    placement = placement_of(cfg)
    plots = []
    if cfg.cuts:
        plots.append(plot_cuts(rows, list(cfg.cuts), "gbn_penalty_pct", out / f"{stem}-gbn.png",
                               "go-back-N - selective repeat (% of best)", logx=False))
        plots.append(plot_cuts(rows, list(cfg.cuts), "ecmp1_penalty_pct", out / f"{stem}-ecmp.png",
                               "ECMP 1 QP - packet spray (% of best)", logx=False))
        plots.append(plot_cuts(rows, list(cfg.cuts), "prod gbn", out / f"{stem}-production-gbn.png",
                               "production parallelism: GBN over SR (%)", logx=False))
        plots.append(plot_cuts(rows, list(cfg.cuts), "prod ecmp/1", out / f"{stem}-production-ecmp.png",
                               "production parallelism: ECMP 1 QP over spray (%)", logx=False))
    axes = [k for k in ("loss", "distance_km", "paths", "link_Bps") if any(k in r for r in rows)]
    cols = ["model", *axes, "best_s", "best", *LB_COLUMNS, *LOSS_RECOVERY, *COLLECTIVES,
            *[f"prod {c}" for c in LB_COLUMNS], "prod gbn"]
    data = write_outputs(out, stem, rows, cols, {"placement": placement}, plots, args.tracking_uri,
                         not args.no_track, {"config": args.config, "reduced": args.reduced})
    print(Path(data["table"]).read_text())


if __name__ == "__main__":
    main_guard(main)
