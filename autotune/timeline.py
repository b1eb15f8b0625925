"""The pipeline schedule of one configuration as a picture: the event simulator's ops (forward,
backward, weight-gradient) per pipeline rank over one step, with the idle time each rank spends
waiting marked, red where the op it waits for arrives across buildings.

The idle time drawn is the simulator's: per rank, the makespan minus its busy time (its bubble),
which ``timeline`` returns beside the picture (``tests/test_explain.py`` checks they agree)."""
from __future__ import annotations

from dataclasses import dataclass

from .costmodel.simulator import chunk_rank, simulate

COLOURS = {"F": "tab:blue", "B": "tab:green", "W": "tab:olive"}


@dataclass(frozen=True)
class Timeline:
    ops: list                 # (rank, kind, micro-batch, chunk, start_s, end_s, ready_s, cross_building)
    makespan_s: float
    busy_s: list              # per rank, from the simulator
    idle_s: list              # per rank, from the drawn ops: the gaps between them up to the makespan
    xb_wait_s: list           # per rank: idle time spent waiting for an op across buildings
    meta: dict

    @property
    def bubble_s(self) -> list:
        """The simulator's bubble per rank: makespan minus busy time."""
        return [self.makespan_s - b for b in self.busy_s]

    def to_dict(self) -> dict:
        return {"makespan_s": self.makespan_s, "bubble_s": self.bubble_s, "idle_s": self.idle_s,
                "xb_wait_s": self.xb_wait_s, "ops": len(self.ops), **self.meta}


def timeline(scenario, config, params=None) -> Timeline:
    """Simulate one step of ``config``'s pipeline and collect every op with its timing."""
    trace: list = []
    sim = simulate(scenario, config, params, trace=trace)
    p, sched, per_b = sim["pp"], sim["schedule"], sim["ranks_per_building"]
    v_shape = sched in ("zbv", "dualpipev")
    n_chunks = 2 * p if v_shape else p * sim["chunks"]

    def building(c):
        return chunk_rank(c, p, v_shape) // per_b

    ops = []
    for r, kind, i, c, start, end, ready in trace:
        src = c - 1 if kind == "F" else c + 1 if kind == "B" else c
        xb = kind != "W" and 0 <= src < n_chunks and building(src) != building(c)
        ops.append((r, kind, i, c, start, end, ready, xb))
    makespan = sim["pipeline_s"]
    idle, xb_wait = [0.0] * p, [0.0] * p
    for r in range(p):
        t = 0.0
        for op in sorted((o for o in ops if o[0] == r), key=lambda o: o[4]):
            gap = op[4] - t
            idle[r] += gap
            if op[7] and gap > 0:
                xb_wait[r] += gap
            t = op[5]
        idle[r] += makespan - t
    meta = {k: sim[k] for k in ("schedule", "pp", "chunks", "micro_batches", "ranks_per_building")}
    return Timeline(ops, makespan, list(sim["busy_s"]), idle, xb_wait, meta)


def timeline_plot(tl: Timeline, path, title: str = "") -> None:
    """Ranks as rows, ops as blocks (F blue, B green, W olive), waits hatched (red: across buildings)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    p = tl.meta["pp"]
    fig, ax = plt.subplots(figsize=(11, 0.45 * p + 1.6))
    for r in range(p):
        t = 0.0
        for op in sorted((o for o in tl.ops if o[0] == r), key=lambda o: o[4]):
            _, kind, i, c, start, end, _ready, xb = op
            if start > t:
                ax.broken_barh([(t, start - t)], (r - 0.4, 0.8), facecolors="none",
                               edgecolors="tab:red" if xb else "lightgrey", hatch="//", linewidth=0.3)
            ax.broken_barh([(start, end - start)], (r - 0.4, 0.8), facecolors=COLOURS[kind], edgecolors="white",
                           linewidth=0.3)
            t = end
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"rank {r} (bldg {r // tl.meta['ranks_per_building']})" for r in range(p)], fontsize=7)
    ax.set_xlabel("seconds into the step")
    ax.set_title(title or f"{tl.meta['schedule']}: pp {p}, {tl.meta['micro_batches']} micro-batches, "
                          f"bubble {tl.bubble_s[0]:.3f} s on rank 0")
    ax.legend(handles=[Patch(color=COLOURS["F"], label="forward"), Patch(color=COLOURS["B"], label="backward"),
                       Patch(color=COLOURS["W"], label="weight gradient"),
                       Patch(facecolor="none", edgecolor="tab:red", hatch="//", label="wait: across buildings"),
                       Patch(facecolor="none", edgecolor="lightgrey", hatch="//", label="wait")],
              fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.5 / (0.45 * p + 1.6) - 0.12), ncol=5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
