"""The ``local-torch`` backend: measure a configuration by really training the reference
workload (autotune/workloads/train.py) with torch.distributed on local CPU processes.

The scenario's model gives the network's shape (use a small preset such as ``llama-mini``), its
cluster the number of ranks and buildings (``local-2bldg``: 2 x 4 ranks). A configuration the
workload cannot run (tp, cp or ep above 1, stages not dividing the layers, too many ranks, too
few micro-batches) fails its trial with that reason before any process starts; a rank that
crashes or hangs fails the trial with the rank's own error, and every process is reaped.

``--backend-option min_measure_s=S`` measures more steps than ``steps`` when they are short, until
about S seconds of steps (at most 100; ``autotune calibrate`` asks for 2 s).
``--backend-option emulate=true`` runs each building's ranks in its own network namespace
(autotune/workloads/netns.py), ``xb_rate_mbit=R`` also shapes each building's uplink to R Mbit/s.
"""
from __future__ import annotations

from ..errors import UserInputError
from . import Measurement


def job_for(scenario, config, warmup: int = 2, steps: int = 5, threads_per_rank: int = 1,
            min_measure_s: float = 0.0) -> dict:
    m = scenario.model
    c = config
    return {"hidden": m.hidden, "heads": m.n_heads, "ffn": m.ffn_hidden, "vocab": m.vocab, "layers": m.n_layers,
            "seq_len": scenario.seq_len, "global_batch": scenario.global_batch_seqs,
            "tp": c.tp, "cp": c.cp, "ep": c.ep, "pp": c.pp, "dp": c.dp, "placement": c.placement,
            "dp_flavour": c.dp_flavour, "pp_schedule": c.pp_schedule, "pp_chunks": c.pp_chunks,
            "micro_batch": c.micro_batch, "overlap_dp": c.overlap_dp, "buildings": scenario.cluster.n_buildings,
            "warmup": int(warmup), "steps": int(steps), "threads_per_rank": int(threads_per_rank),
            "min_measure_s": float(min_measure_s)}


CALIBRATION_MIN_MEASURE_s = 2.0
"""Calibration runs measure at least this long (steps of 0.1 s varied by 30% between runs at the
default 5 steps)."""


class LocalTorchBackend:
    name = "local-torch"
    workload_semantics = {"precision": "fp32", "fsdp_regather": "forward", "activation_memory": "eager",
                          "fsdp_gather": "unit"}
    """What the reference workload does, as scenario workload fields: it trains in fp32, FSDP2
    under torch.distributed.pipelining gathers before every forward and once for the backward
    (one all-gather and one reduce-scatter per fully_shard unit), and
    eager autograd keeps its activations (``autotune calibrate`` fits the cost model with these
    set; ``autotune memory`` checks the memory model against its measured peaks)."""

    def __init__(self, warmup: int | str = 2, steps: int | str = 5, timeout_s: float | str = 300.0,
                 threads_per_rank: int | str = 1, emulate: str | bool = False, xb_rate_mbit: float | str | None = None,
                 min_measure_s: float | str = 0.0):
        try:
            self.warmup, self.steps = int(warmup), int(steps)
            self.min_measure_s = float(min_measure_s)
            self.timeout_s, self.threads = float(timeout_s), int(threads_per_rank)
            self.xb_rate_mbit = float(xb_rate_mbit) if xb_rate_mbit not in (None, "") else None
        except ValueError as e:
            raise UserInputError("--backend-option", str(e), "integers for warmup/steps/threads_per_rank, "
                                                             "seconds for timeout_s and min_measure_s, Mbit/s for "
                                                             "xb_rate_mbit") from None
        if self.min_measure_s < 0:
            raise UserInputError("--backend-option min_measure_s", min_measure_s, "seconds >= 0")
        self.emulate = str(emulate).lower() in ("1", "true", "yes") or self.xb_rate_mbit is not None
        if self.emulate:
            from ..workloads.netns import NamespaceUnavailable, check_available
            try:
                check_available()
            except NamespaceUnavailable as e:
                raise UserInputError("--backend-option emulate", "true", f"a machine that allows it: {e}") from None

    @staticmethod
    def calibration_options(opts: dict, rate_mbit: float, n_buildings: int) -> dict:
        """Backend options for one ``autotune calibrate`` rate: the user's, at least
        CALIBRATION_MIN_MEASURE_s of steps unless they say otherwise, the link shaped to the rate."""
        out = {"min_measure_s": str(CALIBRATION_MIN_MEASURE_s), **opts}
        if n_buildings > 1:
            out["xb_rate_mbit"] = str(rate_mbit)
        return out

    def can_run(self, scenario, config) -> bool:
        """Whether the workload runs this configuration (``autotune calibrate`` designs with it)."""
        from ..workloads.launch import check_job
        try:
            check_job(job_for(scenario, config))
            return True
        except UserInputError:
            return False

    def measure(self, scenario, config) -> Measurement:
        from ..workloads.launch import run_job
        job = job_for(scenario, config, self.warmup, self.steps, self.threads, self.min_measure_s)
        try:
            if self.emulate and job["buildings"] > 1:
                from ..workloads.launch import check_job
                from ..workloads.netns import EmulatedBuildings
                check_job(job)                      # before any namespace or process exists
                with EmulatedBuildings(job["buildings"], self.xb_rate_mbit) as eb:
                    out = run_job(job, timeout_s=self.timeout_s, netns=eb.netns, master_addr=eb.addr[0],
                                  ifname=eb.ifname)
            else:
                out = run_job(job, timeout_s=self.timeout_s)
        except UserInputError as e:
            return Measurement.failure(f"the local workload cannot run this configuration: {e}")
        if "error" in out:
            return Measurement.failure(out["error"])
        return Measurement(iteration_time_s=float(out["iteration_time_s"]), breakdown=out.get("breakdown", {}),
                           extra={"step_times_s": out.get("step_times_s"),
                                  "microbatches": out.get("microbatches"),
                                  "xb_bytes_per_step": out.get("xb_bytes_per_step")}).checked()
