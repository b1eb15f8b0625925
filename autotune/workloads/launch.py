"""Start the ranks of the reference workload, collect rank 0's JSON line, reap everything.

``check_job`` rejects a configuration the workload cannot run before any process starts.
``run_job`` starts one process per rank (optionally inside a per-building network namespace,
``netns=[name per building]``), waits with a deadline, and kills every process group whatever
happens: a rank that crashes or hangs fails the job with that rank's own last error line.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from ..errors import UserInputError
from .train import LOOPED, SCHEDULES, V_SHAPED

MAX_RANKS = 16


def check_job(job: dict) -> None:
    """One-line errors, before any process starts."""
    pp, dp = job["pp"], job["dp"]
    for k in ("tp", "cp", "ep"):
        if job.get(k, 1) != 1:
            raise UserInputError(f"config.{k}", job[k], "1 (the CPU reference workload has no tensor, context or "
                                                        "expert parallelism)")
    world = pp * dp
    if world > MAX_RANKS:
        raise UserInputError("config.dp", dp, f"pp*dp <= {MAX_RANKS} ranks for the local workload (got {world})")
    sched = job["pp_schedule"]
    if pp > 1 and sched not in SCHEDULES:
        raise UserInputError("config.pp_schedule", sched, "one of " + ", ".join(SCHEDULES))
    v = job.get("pp_chunks", 1) if sched in LOOPED else (2 if sched in V_SHAPED else 1)
    stages = pp * v if pp > 1 else 1
    if job["layers"] % stages:
        raise UserInputError("config.pp", pp, f"pp x chunks ({stages}) dividing the model's {job['layers']} layers")
    if job["global_batch"] % (dp * job["micro_batch"]):
        raise UserInputError("config.micro_batch", job["micro_batch"],
                             f"dp*micro_batch dividing the global batch ({job['global_batch']})")
    n_mb = job["global_batch"] // (dp * job["micro_batch"])
    if pp > 1 and n_mb < pp:
        raise UserInputError("config.micro_batch", job["micro_batch"], f"at least pp={pp} micro-batches (got {n_mb})")
    if pp > 1 and sched in LOOPED and n_mb % pp:
        raise UserInputError("config.micro_batch", job["micro_batch"], f"a micro-batch count divisible by pp={pp}")
    B = job["buildings"]
    if B > 1:
        split = dp if job["placement"] == "dp_out" else pp if job["placement"] == "pp_out" else None
        if split is None:
            raise UserInputError("config.placement", job["placement"], "dp_out or pp_out for the local workload")
        if split % B:
            raise UserInputError("config.placement", job["placement"],
                                 f"a dimension divisible by the {B} buildings (got {split})")
    if job.get("overlap_dp", 1) and dp > 1 and (job["dp_flavour"] != "ddp" or pp > 1):
        raise UserInputError("config.overlap_dp", 1, "0 for this workload unless DDP without a pipeline: its ZeRO-1, "
                             "FSDP2 on CPU and DDP under pipelining synchronise after the backward, not during it")
    if job["dp_flavour"] == "hsdp" and dp > 1 and (job["placement"] != "dp_out" or dp % max(B, 1) or B < 2):
        raise UserInputError("config.dp_flavour", "hsdp", "dp_out placement with dp divisible by the buildings")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(job: dict, timeout_s: float = 300.0, netns: list[str] | None = None, master_addr: str = "127.0.0.1",
            ifname: str | None = None, python: str = sys.executable) -> dict:
    """Run every rank; returns rank 0's JSON dict, or {"error": reason}."""
    check_job(job)
    world = job["pp"] * job["dp"]
    per_building = world // max(1, job["buildings"])
    port = _free_port()
    procs = []
    try:
        for r in range(world):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR=master_addr,
                       MASTER_PORT=str(port), OMP_NUM_THREADS=str(job.get("threads_per_rank", 1)),
                       PYTHONWARNINGS="ignore")
            if ifname:
                env["GLOO_SOCKET_IFNAME"] = ifname
            cmd = [python, "-m", "autotune.workloads.train", json.dumps(job)]
            if netns:
                cmd = ["ip", "netns", "exec", netns[r // per_building], *cmd]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                          start_new_session=True))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                r, c = bad[0]
                _reap(procs)
                err = procs[r].stderr.read().strip().splitlines()
                last = next((ln for ln in reversed(err) if ln.strip() and not ln.startswith(" ")), "no message")
                return {"error": f"rank {r} exited with code {c}: {last[:300]}"}
            if all(c == 0 for c in codes):
                out = procs[0].stdout.read()
                for line in reversed(out.splitlines()):
                    if line.startswith("{"):
                        return json.loads(line)
                return {"error": "rank 0 printed no result line"}
            time.sleep(0.05)
        return {"error": f"timed out after {timeout_s:g} s (ranks still running: "
                         f"{[r for r, p in enumerate(procs) if p.poll() is None]})"}
    finally:
        _reap(procs)


def _reap(procs) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
