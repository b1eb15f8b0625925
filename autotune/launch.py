"""What a configuration's transport knobs mean to the software that runs them: NCCL environment
variables and framework options, printed with every best configuration.

NCCL names: docs/env.rst of NVIDIA/nccl 2.30 (NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS,
NCCL_MAX_NCHANNELS, NCCL_BUFFSIZE, NCCL_IB_QPS_PER_CONNECTION); Megatron-LM's
``--ddp-bucket-size`` (parameters per bucket). Load balancing and loss recovery are fabric and NIC
settings (switch ECMP / adaptive routing, the NIC's retransmission mode), not NCCL variables: they
are reported as such.
"""
from __future__ import annotations

from .backends.torchtitan import TORCHTITAN_VERSION, torchtitan_args, torchtitan_notes
from .specs.config import Config
from .errors import UserInputError

_ALGO = {"nccl_auto": None, "ring": "Ring", "tree": "Tree", "hierarchical": None}
_PROTO = {"auto": None, "simple": "Simple", "ll128": "LL128", "ll": "LL"}


def nccl_env(cfg: Config) -> dict[str, str]:
    """Environment variables that make NCCL run the configuration's transport (unset = default)."""
    env = {}
    if _ALGO[cfg.collective]:
        env["NCCL_ALGO"] = _ALGO[cfg.collective]
    if _PROTO[cfg.nccl_protocol]:
        env["NCCL_PROTO"] = _PROTO[cfg.nccl_protocol]
    env["NCCL_MIN_NCHANNELS"] = env["NCCL_MAX_NCHANNELS"] = str(cfg.nccl_channels)
    env["NCCL_BUFFSIZE"] = str(cfg.nccl_buffer_mib * 2**20)
    if cfg.xb_load_balancing != "packet_spray":
        env["NCCL_IB_QPS_PER_CONNECTION"] = str(cfg.xb_queue_pairs)
    return env


def transport_notes(cfg: Config) -> list[str]:
    """The knobs that are not NCCL variables, in words."""
    notes = []
    if cfg.collective == "hierarchical":
        notes.append("hierarchical collectives: the framework's two-level process groups (HSDP / NCCLX-style), "
                     "not an NCCL_ALGO value")
    notes.append({"ecmp": "cross-building load balancing: switch ECMP hashing (enhanced ECMP hashes the QP)",
                  "qp_spray": "cross-building load balancing: host spreads messages over QPs (NCCLX dqplb-style)",
                  "packet_spray": "cross-building load balancing: switch packet spraying / adaptive routing"}
                 [cfg.xb_load_balancing])
    notes.append({"gbn": "loss recovery: go-back-N (RoCE RC default)",
                  "sr": "loss recovery: selective repeat (NIC selective retransmission)"}[cfg.xb_loss_recovery])
    if cfg.dp_bucket_mib:
        notes.append(f"gradient buckets: Megatron-LM --ddp-bucket-size {cfg.dp_bucket_mib * 2**20 // 2} "
                     f"(parameters; {cfg.dp_bucket_mib} MiB of bf16 gradients), PyTorch DDP bucket_cap_mb={cfg.dp_bucket_mib}")
    return notes


def launch_summary(cfg: Config, scenario=None, params=None) -> dict:
    notes = transport_notes(cfg)
    if scenario is not None:
        notes = notes + hetero_notes(scenario, cfg, params)
    return {"nccl_env": nccl_env(cfg), "notes": notes}


def hetero_notes(scenario, cfg: Config, params=None) -> list[str]:
    """What ``hetero_split=by_speed`` asks of the launch: micro-batches per DP replica (dp_out)
    or layers per pipeline stage (pp_out) on each GPU type, as the cost model shares them
    (``costmodel.hetero.hetero_shares``). No framework takes these as a flag; they are set by hand
    (Megatron-Core: a pipeline layout; per-replica micro-batch counts in the data loader)."""
    if cfg.hetero_split != "by_speed":
        return []
    from .costmodel.iteration import iteration_formulas
    from .configbatch import scalar_row
    from .costmodel.params import default_params
    from .costmodel.hetero import speed_types
    from .costmodel.xp import SCALAR
    p = params or default_params()
    plan = iteration_formulas(scenario, scalar_row(cfg), p, SCALAR)["_hetero_plan"]
    if not plan or not any(plan):
        return ["hetero_split=by_speed: the even split is as fast here; every building takes an even share"]
    gpus = {}
    for b in scenario.cluster.buildings:
        gpus.setdefault(b.gpu, []).append(b.name if getattr(b, "name", None) else b.gpu.name)
    types = speed_types(scenario, p)
    what = "micro-batches per step on each DP replica" if cfg.placement == "dp_out" else "layers on each pipeline stage"
    parts = [f"{gpu.name} ({sp:.2f}x the slowest on one reference layer): {int(n)}" for (gpu, _), (sp, *_), n in zip(gpus.items(), types, plan)]
    return [f"hetero_split=by_speed: {what}: " + "; ".join(parts) + " (set by hand: no framework flag)"]


# ---------------------------------------------------------------------------------- launch folder

def config_text(cfg: Config) -> str:
    """The configuration as ``--config`` takes it: every field, ``key=value`` joined by commas."""
    return ",".join(f"{k}={v}" for k, v in cfg.model_dump().items())


_MEGATRON_SCHEDULES = {"1f1b", "interleaved_1f1b"}


MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
"""The Megatron-LM source (2026-08-22) whose option names ``megatron_args`` writes
(megatron/training/arguments.py and the dataclasses its options are generated from)."""


def megatron_args(scenario, cfg: Config) -> tuple[list[str], list[str]]:
    """(Megatron-LM command-line options, notes on what it cannot express) for the configuration.
    ``--ddp-bucket-size`` counts parameters, not bytes."""
    m = scenario.model
    args = [f"--tensor-model-parallel-size {cfg.tp}", f"--pipeline-model-parallel-size {cfg.pp}",
            f"--context-parallel-size {cfg.cp}", f"--expert-model-parallel-size {cfg.ep}",
            f"--micro-batch-size {cfg.micro_batch}", f"--global-batch-size {scenario.global_batch_seqs}",
            f"--seq-length {scenario.seq_len}"]
    notes = []
    if cfg.tp > 1:
        args.append("--sequence-parallel")
    if cfg.etp and cfg.etp != cfg.tp:
        args.append(f"--expert-tensor-parallel-size {cfg.etp}")
    if cfg.tp > 1 and scenario.workload.tp_comm_overlap:
        args.append("--tp-comm-overlap")
    wl = scenario.workload
    if m.moe_experts and wl.moe_routing == "capacity":     # token dropping at the workload's capacity factor
        args.append(f"--moe-expert-capacity-factor {wl.moe_capacity_factor:g}")
    elif m.moe_experts and wl.moe_routing == "balanced":
        args.append("--moe-router-force-load-balancing")
        notes.append("moe_routing=balanced: forced even routing is a benchmarking mode, not training")
    if m.moe_experts and wl.moe_einsum_dispatch:
        notes.append("moe_einsum_dispatch: GShard-style einsum dispatch is DeepSpeed-MoE's; Megatron-Core permutes "
                     "the tokens instead, so this run will not pay the einsum GEMMs the cost model charged")
    if m.moe_experts and cfg.ep > 1:
        # Megatron's default dispatcher (allgather) admits no EP overlap; DeepEP-style de-duplication
        # is the flex dispatcher (HybridEP on NVL72 racks: --moe-flex-dispatcher-backend hybridep)
        args += (["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"] if wl.ep_token_dedup
                 else ["--moe-token-dispatcher-type alltoall"])
        if wl.ep_comm_overlap:
            moe_rerun = cfg.recompute == "full" or (cfg.recompute == "selective" and "moe" in wl.recompute_modules)
            if moe_rerun:
                notes.append("ep_comm_overlap: Megatron-Core refuses --overlap-moe-expert-parallel-comm with full "
                             "recomputation or the moe recompute module")
            elif cfg.pp == 1 or cfg.pp_schedule == "interleaved_1f1b":
                args.append("--overlap-moe-expert-parallel-comm")
            else:
                notes.append("ep_comm_overlap: Megatron-Core overlaps the EP all-to-all only at pp 1 or with the "
                             "interleaved schedule, without full recomputation; not set (the cost model gives it "
                             "no credit here either)")
    layout = wl.resolved_pipeline_layout if cfg.pp > 1 else "even"
    if layout == "ends" and (m.n_layers + 2) % (cfg.pp * cfg.pp_chunks) == 0:
        args += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    elif layout != "even":
        from .costmodel.scenario_consts import head_layer_equivalents
        from .costmodel.stage_split import stage_layers
        split, head = stage_layers(m.n_layers, layout, head_layer_equivalents(m), cfg.pp * cfg.pp_chunks)[:2]
        notes.append(f"pipeline_layout={layout}: layers per virtual stage {split} (the head on stage {head}); "
                     "Megatron-Core takes it as --pipeline-model-parallel-layout"
                     + (" (nanotron's own split)" if layout == "balanced" else " (torchtitan's own split)"))
    if cfg.pp_schedule == "interleaved_1f1b" and layout == "even":
        per_stage = m.n_layers // (cfg.pp * cfg.pp_chunks)
        if per_stage * cfg.pp * cfg.pp_chunks == m.n_layers:
            args.append(f"--num-layers-per-virtual-pipeline-stage {per_stage}")
        else:
            notes.append(f"{m.n_layers} layers do not split evenly into {cfg.pp} x {cfg.pp_chunks} virtual stages: "
                         "set the layer split by hand")
    elif cfg.pp > 1 and cfg.pp_schedule not in _MEGATRON_SCHEDULES:
        notes.append(f"pp_schedule={cfg.pp_schedule}: Megatron-LM runs 1F1B and interleaved 1F1B; "
                     "use torchtitan (torch.distributed.pipelining) for this schedule")
        if scenario.workload.optimizer_post_validation and cfg.pp_schedule == "zb2p":
            notes.append("optimizer_post_validation: --enable-optimizer-post-validation is a flag of Qi et al.'s "
                         "Megatron fork (sail-sg/zero-bubble-pipeline-parallelism), which also runs ZB-2p")
    if cfg.recompute == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif cfg.recompute == "selective":
        args.append("--recompute-granularity selective")
        if scenario.workload.recompute_modules != ("core_attn",):
            args.append("--recompute-modules " + " ".join(scenario.workload.recompute_modules))
    if scenario.workload.offload_modules and cfg.recompute != "full":
        args += ["--fine-grained-activation-offloading",
                 "--offload-modules " + " ".join(scenario.workload.offload_modules)]
    elif scenario.workload.offload_modules:
        notes.append("offload_modules: nothing to offload under recompute full (each layer keeps its input only); "
                     "no --offload-modules")
    if cfg.dp_flavour == "zero1":
        args.append("--use-distributed-optimizer")
        if scenario.workload.zero1_param_sync == "broadcast":
            notes.append("zero1_param_sync=broadcast: the scenario models InternEvo's hybrid ZeRO (gradients "
                         "all-reduced, shards broadcast); Megatron-LM's distributed optimizer reduce-scatters and "
                         "all-gathers over all data-parallel ranks")
    elif cfg.dp_flavour in ("fsdp", "hsdp"):
        args.append("--use-torch-fsdp2")
        if scenario.workload.fsdp_regather == "never":
            args.append("--torch-fsdp2-no-reshard-after-forward")
        if scenario.workload.fsdp_gather != "unit":
            notes.append(f"fsdp_gather={scenario.workload.fsdp_gather}: the scenario models DeepSpeed ZeRO-3's "
                         "collectives; Megatron-LM runs FSDP2, one all-gather and one reduce-scatter per unit")
        if cfg.dp_flavour == "hsdp":
            notes.append("hsdp: FSDP2 over a 2-D (replicate, shard) mesh; Megatron-LM has no one flag for it, "
                         "torchtitan's data_parallel_replicate_degree does")
    if cfg.overlap_dp and cfg.dp > 1:
        args.append("--overlap-grad-reduce")
        if cfg.dp_flavour == "zero1":
            args.append("--overlap-param-gather")
    if cfg.dp_bucket_mib:
        args.append(f"--ddp-bucket-size {cfg.dp_bucket_mib * 2**20 // 2}")
    return args, notes


def write_launch_dir(out: str, scenario, top: list, command: str, measured_s: list | None = None,
                     backend: str = "costmodel") -> list[str]:
    """Write what a user needs to launch the best configuration into folder ``out``:
    best_config.yaml (reads back with ``--config``), torchtitan_args.txt (torchtitan 0.3.0),
    megatron_args.txt, nccl.env, top_k.csv (each candidate with its breakdown), scenario.yaml
    (the effective scenario after every override). ``top``: (Config, Evaluation) fastest first;
    ``measured_s``: each one's time as the study's ``backend`` measured it (the rank follows it).
    Every file is written beside its final name and renamed into place, so a crash leaves either
    the old file or the new one. Returns the paths written."""
    import csv
    import io
    import os
    import tempfile
    from pathlib import Path

    import yaml
    d = Path(out)
    cfg, ev = top[0]
    files: dict[str, str] = {}
    files["best_config.yaml"] = yaml.safe_dump({
        "best_config": cfg.model_dump(), "iteration_time_s": ev.iteration_time_s, "tokens_per_s": ev.tokens_per_s,
        "mfu": ev.mfu, "memory_per_gpu_bytes": ev.memory_per_gpu_bytes, "scenario_key": scenario.key,
        "config_text": config_text(cfg), "command": command}
        | ({"measured_iteration_time_s": measured_s[0], "measured_by": backend} if measured_s else {}), sort_keys=False)
    files["torchtitan_args.txt"] = (f"# torchtitan {TORCHTITAN_VERSION}: after --module <model> --config <its config>\n"
                                    + " ".join(torchtitan_args(scenario, cfg)) + "\n"
                                    + "".join(f"# note: {n}\n" for n in torchtitan_notes(scenario, cfg)))
    margs, mnotes = megatron_args(scenario, cfg)
    files["megatron_args.txt"] = (f"# Megatron-LM (option names as of commit {MEGATRON_COMMIT[:12]})\n"
                                  + " \\\n".join(margs) + "\n" + "".join(f"# note: {n}\n" for n in mnotes))
    env = nccl_env(cfg)
    files["nccl.env"] = ("".join(f"export {k}={v}\n" for k, v in env.items())
                         + "".join(f"# {n}\n" for n in transport_notes(cfg)))
    buf = io.StringIO()
    w = csv.writer(buf)
    keys = list(ev.breakdown)
    w.writerow(["rank", "config", *(["measured_s"] if measured_s else []), "iteration_time_s", "tokens_per_s", "mfu",
                "memory_per_gpu_bytes", "xb_bytes_per_step", *keys])
    for i, (c, e) in enumerate(top, start=1):
        w.writerow([i, config_text(c), *([measured_s[i - 1]] if measured_s else []), e.iteration_time_s,
                    e.tokens_per_s, e.mfu, e.memory_per_gpu_bytes, e.traffic["xb_bytes_per_step"],
                    *(e.breakdown[k] for k in keys)])
    files["top_k.csv"] = buf.getvalue()
    files["scenario.yaml"] = yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)
    for name in files:                 # every name checked before the first file is written
        if (d / name).is_dir() or ((d / name).exists() and not (d / name).is_file()):
            raise UserInputError("--out", str(d / name), f"a folder where {name} can be written (that name is "
                                                         "taken by a folder or a special file)")
    written = []
    umask = os.umask(0)
    os.umask(umask)
    for name, text in files.items():
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=d)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o666 & ~umask)       # mkstemp makes 0600; a result file is the user's usual mode
            os.replace(tmp, d / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(str(d / name))
    return written


def check_out_dir(out: str):
    """Create ``out`` if needed; a one-line UserInputError where it is a file or not writable.
    Returns the topmost folder this call created (``out`` or a parent of it), else None:
    ``cli_common.remove_unused_out`` removes them again where nothing was written."""
    import os
    from pathlib import Path

    from .errors import UserInputError
    d = Path(out)
    if d.exists() and not d.is_dir():
        raise UserInputError("--out", out, "a folder (this is a file)")
    created = next((p for p in reversed((d, *d.parents)) if not p.exists()), None)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError("--out", out, f"a folder that can be created ({exc.strerror})") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise UserInputError("--out", out, "a writable folder")
    return created
