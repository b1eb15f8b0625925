"""``autotune memory``: the memory model against the reference workload's own measured peaks.

The reference workload (``autotune/workloads/train.py``, the ``local-torch`` backend) trains a
small Llama on CPU processes under every data-parallel flavour and pipeline schedule the model
knows. With ``measure_memory`` each rank records the most bytes its live tensors held during the
measured steps (``workloads/memprobe.py``: the CPU allocator's running total, torch's profiler,
the equivalent of ``torch.cuda.max_memory_allocated``). The model's prediction for the same
configuration is ``memory_per_gpu_bytes`` of the cost model under the workload's semantics (fp32,
FSDP2's regather, eager activations: ``LocalTorchBackend.workload_semantics``) less the GPU
framework reserve (a CUDA context and NCCL buffers, which CPU ranks do not have); it is compared
with the largest rank's peak (the model describes the bottleneck rank).

The shipped measurements (``autotune/data/workload_memory.csv``) were made with ``autotune memory
--measure --write``; ``--measure`` measures the grid again on this machine (a minute or two).
"""
from __future__ import annotations

import csv
import math
import platform
import statistics
from importlib import resources
from pathlib import Path

from .errors import UserInputError

MODEL = "llama-mini"
CLUSTER = "local-2bldg"
FIELDS = ("dp", "pp", "dp_flavour", "pp_schedule", "pp_chunks", "micro_batch", "seq_len", "global_batch",
          "placement", "measured_peak_bytes", "measured_between_steps_bytes", "torch", "machine")
TARGET_PCT = 10.0
"""The issue's bound on |error| for the DP flavours under the schedules the model describes."""
PAPER_SCHEDULES = ("none", "gpipe", "1f1b")
"""Schedules whose in-flight counts the model and torch's implementation agree on; the others
(interleaved, ZBV, ZB1P) are reported beside them."""


class MeasurementFailed(RuntimeError):
    """A run of the grid failed (its rank's error): nothing is written."""


def grid() -> list[dict]:
    """The measured configurations: every DP flavour at pp 1 (two micro-batch sizes, two sequence
    lengths) and under GPipe and 1F1B at pp 2, HSDP over the two emulated buildings (pp 1: HSDP
    under a pipeline hung on gloo), ZeRO-1 on 8 ranks, and the schedules at pp 4."""
    out = []

    def add(dp, pp, fl, mb, sched="1f1b", v=1, seq=128, gb=32):
        out.append({"dp": dp, "pp": pp, "dp_flavour": fl, "pp_schedule": sched if pp > 1 else "1f1b",
                    "pp_chunks": v, "micro_batch": mb, "seq_len": seq, "global_batch": gb,
                    "placement": "dp_out" if pp == 1 or dp > 2 else "pp_out"})
    for fl in ("ddp", "zero1", "fsdp"):
        add(2, 1, fl, 2)
        add(2, 1, fl, 8)
        add(2, 1, fl, 4, seq=256, gb=16)
        for sched in ("gpipe", "1f1b"):
            add(2, 2, fl, 4, sched)
    add(4, 1, "hsdp", 4)
    add(4, 1, "hsdp", 8)
    add(4, 2, "zero1", 2, "1f1b")
    for sched, v in (("1f1b", 1), ("interleaved_1f1b", 2), ("zbv", 1), ("zb1p", 1)):
        add(1, 4, "ddp", 2, sched, v)
    return out


def _scenario(row: dict):
    from .backends.local_torch import LocalTorchBackend
    from .specs.presets import build_scenario
    s = build_scenario(model=MODEL, cluster=CLUSTER, gpus=row["dp"] * row["pp"], global_batch=row["global_batch"],
                       seq_len=row["seq_len"], precision=None, scenario_file=None, overrides=())
    return s.with_workload(**LocalTorchBackend.workload_semantics)


def _config(row: dict):
    from .specs.config import Config
    return Config(dp=row["dp"], pp=row["pp"], dp_flavour=row["dp_flavour"], pp_schedule=row["pp_schedule"],
                  pp_chunks=row["pp_chunks"], micro_batch=row["micro_batch"], placement=row["placement"],
                  overlap_dp=1 if row["dp_flavour"] == "ddp" and row["pp"] == 1 and row["dp"] > 1 else 0)


def predicted_bytes(row: dict) -> float:
    """The cost model's memory per GPU for the row, less the GPU framework reserve."""
    from .costmodel import constants as C
    from .costmodel.iteration import iteration_formulas
    from .configbatch import scalar_row
    from .costmodel.params import default_params
    from .costmodel.xp import SCALAR
    out = iteration_formulas(_scenario(row), scalar_row(_config(row)), default_params(), SCALAR)
    return float(out["memory_per_gpu_bytes"]) - C.FRAMEWORK_RESERVED_BYTES


def measure(rows: list[dict], timeout_s: float = 180.0, progress=None) -> list[dict]:
    """Run each configuration once (one warm-up step, one measured) with the memory probe on."""
    import torch

    from .backends.local_torch import job_for
    from .workloads.launch import run_job
    out = []
    for row in rows:
        job = job_for(_scenario(row), _config(row), warmup=1, steps=1)
        job["measure_memory"] = True
        res = run_job(job, timeout_s=timeout_s)
        if "error" in res:
            raise MeasurementFailed(f"measuring {describe(row)} failed: {res['error']}")
        out.append({**row, "measured_peak_bytes": max(res["peak_memory_bytes_by_rank"]),
                    "measured_between_steps_bytes": max(res["between_steps_memory_bytes_by_rank"]),
                    "torch": torch.__version__, "machine": f"{platform.machine()} {platform.system()}"})
        if progress:
            progress()
    return out


def describe(row: dict) -> str:
    sched = row["pp_schedule"] + (f" v={row['pp_chunks']}" if row["pp_chunks"] > 1 else "") if row["pp"] > 1 else ""
    return (f"dp={row['dp']} pp={row['pp']} {row['dp_flavour']} {sched} mb={row['micro_batch']} "
            f"seq={row['seq_len']}").replace("  ", " ")


_INT = ("dp", "pp", "pp_chunks", "micro_batch", "seq_len", "global_batch")


def load(path: str | None = None) -> list[dict]:
    """The measured rows of a CSV written by ``write`` (default: the shipped file); a missing,
    unreadable or malformed file, or a row the workload could not have run, is a UserInputError
    naming the line."""
    try:
        text = Path(path).read_text() if path else \
            resources.files("autotune.data").joinpath("workload_memory.csv").read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise UserInputError("--data", path, f"a readable CSV written by autotune memory --write ({why})") from None
    rows = [_row(r, i, path) for i, r in enumerate(csv.DictReader(text.splitlines()), start=2)]
    if not rows:
        raise UserInputError("--data", path, "a CSV with at least one measured row")
    return rows


def _row(r: dict, line: int, path) -> dict:
    """One CSV record as a checked row."""
    from .backends.local_torch import job_for
    from .workloads.launch import check_job

    def bad(what):
        return UserInputError("--data", path, f"{what} (line {line})")
    missing = [k for k in FIELDS if not (r.get(k) or "").strip()]
    if missing:
        raise bad(f"the columns {', '.join(FIELDS)}, each with a value; {', '.join(missing)} missing")
    row = dict(r)
    for k in _INT + ("measured_peak_bytes", "measured_between_steps_bytes"):
        try:
            row[k] = int(r[k]) if k in _INT else float(r[k])
        except ValueError:
            raise bad(f"column {k}: got {r[k]!r}; allowed: " + ("a whole number" if k in _INT else
                                                                "a number of bytes")) from None
    if not all(math.isfinite(row[k]) and row[k] > 0 for k in ("measured_peak_bytes", "measured_between_steps_bytes")):
        raise bad("measured bytes that are finite and above 0")
    try:
        check_job(job_for(_scenario(row), _config(row)))
    except (UserInputError, ValueError) as e:       # pydantic's ValidationError is a ValueError
        if callable(getattr(e, "errors", None)):      # pydantic's: its first error, by field and value
            from .errors import from_pydantic
            e = from_pydantic(e)
        what = str(e).splitlines()[0] if not isinstance(e, UserInputError) else f"{e.field}={e.value}: {e.allowed}"
        raise bad(f"a configuration the reference workload runs ({what})") from None
    return row


def write(rows: list[dict], path: str) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in FIELDS})


def compare(rows: list[dict]) -> dict:
    """Every row's prediction and error, summarised for the DP flavours under the schedules the
    model describes (``PAPER_SCHEDULES``) and for the others."""
    scored = []
    for r in rows:
        pred = predicted_bytes(r)
        meas = r["measured_peak_bytes"]
        sched = r["pp_schedule"] if r["pp"] > 1 else "none"
        scored.append({**r, "case": describe(r), "schedule": sched, "predicted_bytes": pred,
                       "err_pct": 100.0 * (pred / meas - 1.0)})

    def summary(sel):
        errs = sorted(abs(s["err_pct"]) for s in sel)
        if not errs:
            return None
        return {"n": len(errs), "median_abs_err_pct": statistics.median(errs),
                "p90_abs_err_pct": errs[min(len(errs) - 1, int(0.9 * len(errs)))], "max_abs_err_pct": errs[-1]}
    paper = [s for s in scored if s["schedule"] in PAPER_SCHEDULES]
    return {"rows": scored,
            "by_flavour": {fl: summary([s for s in paper if s["dp_flavour"] == fl])
                           for fl in dict.fromkeys(s["dp_flavour"] for s in paper)},
            "paper_schedules": summary(paper),
            "other_schedules": {sc: summary([s for s in scored if s["schedule"] == sc])
                                for sc in dict.fromkeys(s["schedule"] for s in scored if s not in paper)},
            "target_pct": TARGET_PCT}
