"""The ``command`` backend: measure a configuration by running a command on a real cluster.

The command is a template filled from the configuration, run locally (``bash -c``) or through a
scheduler (``srun ...``, ``sbatch --wait ...``). It must print one JSON line with the measured
step time, ``{"iteration_time_s": 12.3}`` (``step_time_s`` is accepted too; other keys go to the
measurement's extras); the last such line wins. A non-zero exit, a timeout, or output without
that line makes the trial fail with the reason (the command's last stderr line).

Template fields: every configuration field (``{tp}``, ``{pp}``, ``{placement}``, ...), the
scenario's ``{n_gpus}``, ``{global_batch_seqs}``, ``{seq_len}``, ``{model}``, and the torchtitan
names below (``{torchtitan_args}`` is all of them as command-line options). The whole
configuration is also in the environment as ``AUTOTUNE_CONFIG_JSON``.

Mapping to torchtitan (``--parallelism.*`` and ``--training.*`` of its JobConfig):

==========================================  ======================================================
torchtitan option                           from the configuration
==========================================  ======================================================
``--parallelism.tensor_parallel_degree``    tp
``--parallelism.context_parallel_degree``   cp
``--parallelism.expert_parallel_degree``    ep
``--parallelism.pipeline_parallel_degree``  pp
``--parallelism.data_parallel_shard_degree``      dp for fsdp/zero1; dp / buildings for hsdp; 1 for ddp
``--parallelism.data_parallel_replicate_degree``  1 for fsdp/zero1; buildings for hsdp; dp for ddp
``--parallelism.pipeline_parallel_schedule``      PyTorch schedule class name (``Interleaved1F1B``, ...)
``--parallelism.pipeline_parallel_microbatch_size``  micro_batch
``--activation_checkpoint.mode``            none / selective / full
==========================================  ======================================================

torchtitan has no ZeRO-1 mode of its own (FSDP with ``reshard_after_forward=False`` is the
nearest); placement and transport knobs have no torchtitan option: pass them to your launcher
(rank ordering, NCCL environment: ``NCCL_IB_QPS_PER_CONNECTION={xb_queue_pairs}``).
"""
from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import time

from ..errors import UserInputError
from ..specs.config import TORCH_SCHEDULE_NAMES
from . import Measurement

RECOMPUTE_TO_TORCHTITAN = {"none": "none", "selective": "selective", "full": "full"}


def torchtitan_fields(scenario, config) -> dict:
    """The torchtitan option values of a configuration (see the module docstring)."""
    B = scenario.cluster.n_buildings if config.placement == "dp_out" else 1
    if config.dp_flavour == "ddp":
        shard, replicate = 1, config.dp
    elif config.dp_flavour == "hsdp":
        replicate = B if config.dp % B == 0 else 1
        shard = config.dp // replicate
    else:
        shard, replicate = config.dp, 1
    sched = TORCH_SCHEDULE_NAMES[config.pp_schedule].removeprefix("Schedule")
    return {"parallelism.tensor_parallel_degree": config.tp, "parallelism.context_parallel_degree": config.cp,
            "parallelism.expert_parallel_degree": config.ep, "parallelism.pipeline_parallel_degree": config.pp,
            "parallelism.data_parallel_shard_degree": shard,
            "parallelism.data_parallel_replicate_degree": replicate,
            "parallelism.pipeline_parallel_schedule": sched,
            "parallelism.pipeline_parallel_microbatch_size": config.micro_batch,
            "activation_checkpoint.mode": RECOMPUTE_TO_TORCHTITAN[config.recompute]}


def parse_result(stdout: str) -> dict | None:
    """The last stdout line that is a JSON object with a step time, or None."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and ("iteration_time_s" in d or "step_time_s" in d):
            return d
    return None


class CommandBackend:
    """Run ``template`` (filled from the configuration) and parse its JSON step-time line."""

    name = "command"

    def __init__(self, template: str | None = None, timeout_s: float | str = 3600.0, shell: str = "bash"):
        if not template:
            raise UserInputError("--backend-option template", template,
                                 "a command template, e.g. template='srun ./train.sh {torchtitan_args}'")
        self.template = template
        try:
            self.timeout_s = float(timeout_s)
        except ValueError:
            raise UserInputError("--backend-option timeout_s", timeout_s, "a number of seconds") from None
        self.shell = shell

    def render(self, scenario, config) -> str:
        tt = torchtitan_fields(scenario, config)
        fields = dict(config.model_dump()) | {
            "n_gpus": scenario.n_gpus, "global_batch_seqs": scenario.global_batch_seqs,
            "seq_len": scenario.seq_len, "model": scenario.model.name,
            "torchtitan_args": " ".join(f"--{k}={shlex.quote(str(v))}" for k, v in tt.items())}
        fields |= {k.split(".")[-1]: v for k, v in tt.items()}
        try:
            return self.template.format(**fields)
        except (KeyError, IndexError, ValueError) as e:
            raise UserInputError("--backend-option template", self.template,
                                 f"fields among {', '.join(sorted(fields))} ({type(e).__name__}: {e})") from None

    def measure(self, scenario, config) -> Measurement:
        cmd = self.render(scenario, config)
        env = dict(os.environ, AUTOTUNE_CONFIG_JSON=config.model_dump_json())
        t0 = time.perf_counter()
        proc = subprocess.Popen([self.shell, "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Measurement.failure(f"command timed out after {self.timeout_s:g} s")
        finally:
            _kill_group(proc)         # nothing the command started outlives the trial
        last_err = (err.strip().splitlines() or [""])[-1][:300]
        if proc.returncode != 0:
            why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            return Measurement.failure(f"command failed ({why}): {last_err}".rstrip(": "))
        d = parse_result(out)
        if d is None:
            return Measurement.failure("command printed no JSON line with iteration_time_s"
                                       + (f" (stderr: {last_err})" if last_err else ""))
        t = d.get("iteration_time_s", d.get("step_time_s"))
        try:
            t = float(t)
        except (TypeError, ValueError):
            return Measurement.failure(f"command reported a non-numeric step time: {t!r}")
        breakdown = d.get("breakdown") if isinstance(d.get("breakdown"), dict) else {}
        extra = {k: v for k, v in d.items() if k not in ("iteration_time_s", "step_time_s", "breakdown")}
        extra["wall_s"] = time.perf_counter() - t0
        return Measurement(iteration_time_s=t, feasible=bool(d.get("feasible", True)) and math.isfinite(t),
                           reason=str(d.get("reason", "")), breakdown=breakdown, extra=extra).checked()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
