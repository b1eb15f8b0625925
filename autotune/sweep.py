"""Design-point sweeps: expand a sweep config into scenarios, evaluate them in parallel, write
tables, plots and MLflow runs. The experiment scripts in ``experiments/`` are thin users of it.

A sweep config (YAML) names ``models``, a base ``cluster`` preset, ``base`` overrides (dotted
``--set`` keys) and its axes, either as ``cuts`` (one-dimensional cuts through the base point:
each axis varied alone) or ``grid`` (the full product). ``reduced`` holds the keys a CI-sized
run replaces.
"""
from __future__ import annotations

import itertools
import json
import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import UserInputError

SHORT_AXIS_NAMES = {
    "cluster.cross_building.oversubscription": "oversub",
    "cluster.cross_building.distance_km": "distance_km",
    "cluster.cross_building.loss_rate": "loss",
    "cluster.cross_building.n_paths": "paths",
    "cluster.cross_building.link_Bps": "link_Bps",
    "cluster.cross_building.bandwidth_Bps": "xb_Bps",
    "workload.global_batch_seqs": "batch_seqs",
}


@dataclass(frozen=True)
class DesignPoint:
    model: str
    cluster: str
    overrides: tuple = ()          # ((dotted key, value), ...) in axis order
    axis: str = ""                 # the axis this point varies ("" for grid points / the base)

    def scenario(self):
        from .specs import build_scenario
        return build_scenario(model=self.model, cluster=self.cluster,
                              overrides=[f"{k}={v}" for k, v in self.overrides])

    def label(self) -> dict:
        return {"model": self.model, "cluster": self.cluster} | {
            SHORT_AXIS_NAMES.get(k, k): v for k, v in self.overrides}


@dataclass
class SweepConfig:
    name: str
    models: list
    clusters: list
    base: dict = field(default_factory=dict)
    cuts: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path, reduced: bool = False) -> "SweepConfig":
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise UserInputError("--config", str(path), f"a readable YAML sweep config ({type(e).__name__})") from None
        if reduced:
            data.update(data.pop("reduced", {}) or {})
        data.pop("reduced", None)
        known = {"name", "models", "clusters", "base", "cuts", "grid", "options"}
        for k in data:
            if k not in known:
                raise UserInputError(f"config.{k}", data[k], "one of " + ", ".join(sorted(known)))
        for k in ("name", "models", "clusters"):
            if not data.get(k):
                raise UserInputError(f"config.{k}", data.get(k), "a non-empty value")
        return cls(**data)

    def points(self) -> list[DesignPoint]:
        """Base point, then every cut (each axis alone, the others at base), or the full grid."""
        out = []
        for model, cluster in itertools.product(self.models, self.clusters):
            if self.grid:
                keys = list(self.grid)
                for values in itertools.product(*(self.grid[k] for k in keys)):
                    ov = dict(self.base) | dict(zip(keys, values))
                    out.append(DesignPoint(model, cluster, tuple(ov.items())))
                continue
            seen = set()
            for axis, values in (self.cuts or {"": [None]}).items():
                for v in values:
                    ov = dict(self.base) | ({axis: v} if axis else {})
                    key = tuple(ov.items())
                    if key in seen:
                        continue
                    seen.add(key)
                    out.append(DesignPoint(model, cluster, key, axis))
        return out


def run_points(fn, points, workers: int | None = None, progress: bool = True) -> list:
    """``fn(point)`` for every point, in ``workers`` processes (default: all cores), in order."""
    workers = workers or os.cpu_count() or 1
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(points), desc="design points", unit="pt")
    results = []
    if workers == 1:
        for p in points:
            results.append(fn(p))
            bar and bar.update()
    else:
        with ProcessPoolExecutor(workers) as ex:
            for r in ex.map(fn, points):
                results.append(r)
                bar and bar.update()
    if bar:
        bar.close()
    return results


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    def fmt(x):
        if isinstance(x, float):
            if not math.isfinite(x):
                return "-"
            return f"{x:.4g}"
        return "-" if x is None else str(x)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_outputs(out_dir: str | Path, stem: str, rows: list[dict], columns: list[str], extra: dict | None = None,
                  plots: list[Path] = (), tracking_uri: str | None = None, track: bool = True,
                  params: dict | None = None) -> dict:
    """JSON + markdown table under ``out_dir``; one MLflow run with the table, JSON and plots."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = out / f"{stem}.md"
    table.write_text(markdown_table(rows, columns))
    data = {"rows": rows, "table": str(table), "plots": [str(p) for p in plots]} | (extra or {})
    js = out / f"{stem}.json"
    js.write_text(json.dumps(data, indent=2, default=str))
    if track:
        from .study import default_tracking_uri
        from .tracking import Tracker
        tr = Tracker(tracking_uri or default_tracking_uri(), f"experiment-{stem}", "memory",
                     tags={"autotune.kind": "experiment"})
        tr.log_study(params=params or {}, metrics={"design_points": len(rows)})
        for p in [table, js, *plots]:
            tr.log_artifact(str(p))
        tr.flush()
        data["mlflow_run_id"] = tr.parent_id
        js.write_text(json.dumps(data, indent=2, default=str))     # the file names its MLflow run too
    return data


def plot_cuts(rows: list[dict], axes: list[str], y_key: str, path: Path, ylabel: str, series=("model",),
              logx=True, hline: float | None = 0.0) -> Path:
    """One panel per cut axis: ``y_key`` against the axis value, one line per ``series`` value."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    axes = [a for a in axes if any(r.get("axis") == a for r in rows)]
    fig, panels = plt.subplots(1, max(1, len(axes)), figsize=(5 * max(1, len(axes)), 3.6), squeeze=False)
    for ax, axis in zip(panels[0], axes):
        short = SHORT_AXIS_NAMES.get(axis, axis)
        sub = [r for r in rows if r.get("axis") == axis]
        for name in dict.fromkeys(tuple(r[s] for s in series) for r in sub):
            pts = sorted((r[short], r[y_key]) for r in sub if tuple(r[s] for s in series) == name
                         and r.get(y_key) is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=" ".join(map(str, name)))
        if logx and all((r[short] or 0) > 0 for r in sub):
            ax.set_xscale("log")
        if hline is not None:
            ax.axhline(hline, color="grey", lw=0.8)
        ax.set_xlabel(short)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def flips(rows: list[dict], axis: str, y_key: str, series=("model",)) -> list[dict]:
    """Where ``y_key`` changes sign along a cut: the two axis values it changes between."""
    short = SHORT_AXIS_NAMES.get(axis, axis)
    found = []
    sub = [r for r in rows if r.get("axis") == axis and r.get(y_key) is not None]
    for name in dict.fromkeys(tuple(r[s] for s in series) for r in sub):
        pts = sorted((r[short], r[y_key]) for r in sub if tuple(r[s] for s in series) == name)
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if (y0 > 0) != (y1 > 0):
                found.append({"series": " ".join(map(str, name)), "axis": short, "between": [x0, x1],
                              "from": "positive" if y0 > 0 else "non-positive"})
    return found


def script_args(description: str, default_config: str):
    """The command line every experiment script shares."""
    import argparse
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=default_config, help="sweep config (YAML)")
    ap.add_argument("--reduced", action="store_true", help="the CI-sized version declared in the config")
    ap.add_argument("--grid", action="store_true", help="the full product of the cut axes instead of cuts")
    ap.add_argument("--out", default="experiments/out", help="output folder")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    ap.add_argument("--tracking-uri", default=None)
    ap.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    return ap


@dataclass
class ScriptRun:
    args: object
    config: SweepConfig
    out: Path
    stem: str


def sweep_script(description: str, default_config: str, measure, workers_fn=None) -> tuple[ScriptRun, list]:
    """Parse the shared command line, load and check the config, measure every design point
    (``measure(point) -> row``) in parallel; returns the run context and the rows."""
    args = script_args(description, default_config).parse_args()
    cfg = load_for_script(args)
    rows = run_points(measure if workers_fn is None else workers_fn(cfg), cfg.points(), args.workers)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = cfg.name + ("-reduced" if args.reduced else "") + ("-grid" if args.grid else "")
    return ScriptRun(args, cfg, out, stem), rows


def load_for_script(args) -> SweepConfig:
    cfg = SweepConfig.load(args.config, reduced=args.reduced)
    if args.grid and cfg.cuts:
        cfg.grid, cfg.cuts = dict(cfg.cuts), {}
    for p in cfg.points():      # every design point is valid before any work starts
        p.scenario()
    return cfg


def main_guard(fn):
    """Run an experiment's main: a user mistake is one line on stderr and exit 2."""
    import sys
    try:
        fn()
    except UserInputError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def dataclass_args(cls, doc: str):
    """An experiment script's options from its ``Args`` dataclass (CleanRL style): one
    ``--field-name`` per field, typed by its default; a bool is a flag."""
    import argparse
    from dataclasses import asdict
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for k, v in asdict(cls()).items():
        if isinstance(v, bool):
            ap.add_argument(f"--{k.replace('_', '-')}", action="store_true")
        else:
            ap.add_argument(f"--{k.replace('_', '-')}", type=type(v), default=v)
    return cls(**vars(ap.parse_args()))
