"""Configuration -> torchtitan 0.3.0 options: what the ``command`` backend's ``{torchtitan_args}``
and ``autotune search --out``'s launch files write.

Mapping to torchtitan 0.3.0 (the PyPI release; ``torchtitan/config/configs.py``, options given
as ``--section.field=value`` after its ``--module`` / ``--config``):

=================================================  ===============================================
torchtitan option                                  from the configuration
=================================================  ===============================================
``--parallelism.tensor_parallel_degree``           tp
``--parallelism.context_parallel_degree``          cp
``--parallelism.expert_parallel_degree``           ep
``--parallelism.pipeline_parallel_degree``         pp
``--parallelism.data_parallel_shard_degree``       dp for fsdp/zero1; dp / buildings spanned for hsdp; 1 for ddp
``--parallelism.data_parallel_replicate_degree``   1 for fsdp/zero1; buildings spanned for hsdp; dp for ddp
``--parallelism.pipeline_parallel_schedule``       PyTorch schedule class name (``Interleaved1F1B``, ...)
``--parallelism.pipeline_parallel_microbatch_size``  micro_batch
``--parallelism.fsdp_reshard_after_forward``       fsdp / hsdp: always, or never where the workload's
                                                   regather policy is never; zero1: never
``--training.local_batch_size``                    pp > 1: global batch / dp (cut into micro-batches);
                                                   pp = 1: micro_batch (gradients accumulate to the global batch)
``--training.global_batch_size``, ``--training.seq_len``   the scenario's
``--parallelism.pipeline_parallel_layers_per_stage``  pp_chunks > 2: the layers per virtual stage (with
(and ``..._first/last_stage_less_layers``)           the two weights) that give pp x pp_chunks stages
``--training.disable_cuda_graphs``                 pp > 1 or ep > 1 (torchtitan refuses CUDA graphs there)
``activation-checkpoint:{none,selective,full}``    recompute (a tyro subcommand, last on the line)
=================================================  ===============================================

``tests/test_torchtitan_parser.py`` installs torchtitan 0.3.0 and parses these options with its
own ``ConfigManager``. What the options cannot say is printed as notes (``torchtitan_notes``):
zb1p / zb2p with one stage per rank, and chunk counts no layers-per-stage value gives.

torchtitan has no ZeRO-1 mode of its own (FSDP with ``reshard_after_forward`` never is the
nearest); placement and transport knobs have no torchtitan option: pass them to your launcher
(rank ordering, NCCL environment: ``NCCL_IB_QPS_PER_CONNECTION={xb_queue_pairs}``). A template's
named fields are the last part of each option name (``{tensor_parallel_degree}``, ...) and
``{mode}`` for the recompute setting.
"""
from __future__ import annotations

from ..specs.config import TORCH_SCHEDULE_NAMES

RECOMPUTE_TO_TORCHTITAN = {"none": "none", "selective": "selective", "full": "full"}
TORCHTITAN_OPTIONS = ("parallelism.tensor_parallel_degree", "parallelism.context_parallel_degree",
                      "parallelism.expert_parallel_degree", "parallelism.pipeline_parallel_degree",
                      "parallelism.data_parallel_shard_degree", "parallelism.data_parallel_replicate_degree",
                      "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_microbatch_size",
                      "activation_checkpoint.mode")
TORCHTITAN_VERSION = "0.3.0"
"""The torchtitan release whose option names ``torchtitan_args`` writes (read from its source)."""
_REGATHER_TO_RESHARD = {"every_pass": "always", "forward": "always", "never": "never"}
"""torchtitan's ``fsdp_reshard_after_forward`` per workload regather policy: "default" would
mean never under pipeline parallelism, so the policies that gather before each forward say so."""


def _dp_buildings(scenario, config) -> int:
    """Buildings the data-parallel group spans under the configuration's placement (the cost
    model's ``terms.building_spans``): HSDP replicates across them."""
    B = scenario.cluster.n_buildings
    if config.placement in ("dp_out", "ep_out", "cp_out"):
        return B
    if config.placement == "hybrid":
        from ..costmodel.scenario_consts import hybrid_split
        return hybrid_split(B)[1] or 1
    return 1


def torchtitan_fields(scenario, config) -> dict:
    """The torchtitan option values of a configuration (see the module docstring)."""
    B = _dp_buildings(scenario, config)
    if config.dp_flavour == "ddp":
        shard, replicate = 1, config.dp
    elif config.dp_flavour == "hsdp":
        replicate = B if config.dp % B == 0 else 1
        shard = config.dp // replicate
    else:
        shard, replicate = config.dp, 1
    sched = TORCH_SCHEDULE_NAMES[config.pp_schedule].removeprefix("Schedule")
    values = (config.tp, config.cp, config.ep, config.pp, shard, replicate, sched, config.micro_batch,
              RECOMPUTE_TO_TORCHTITAN[config.recompute])
    return dict(zip(TORCHTITAN_OPTIONS, values))


def _virtual_stage_fields(n_layers: int, pp: int, chunks: int) -> dict:
    """torchtitan's split into ``pp * chunks`` virtual stages. Without options it runs 2 stages per
    rank for a multi-stage schedule (pipeline_parallel.py: ``stages_per_rank = 2``) and counts
    ``ceil((layers + first_less + last_less) / layers_per_stage)`` stages when
    ``pipeline_parallel_layers_per_stage`` is given; pick the weights (0 or 1 layer's worth for the
    embedding and the output, preferring 0, which is the model's equal split) and the layers per
    stage that give exactly ``pp * chunks``. Empty when the default already does, or when no
    choice does (then the schedule runs torchtitan's default split)."""
    if pp == 1 or chunks == 1 or chunks == 2:
        return {}
    n = pp * chunks
    for first, last in ((0, 0), (1, 0), (0, 1), (1, 1)):
        total = n_layers + first + last
        for lps in range(1, total + 1):
            if -(-total // lps) == n:
                return {"parallelism.pipeline_parallel_first_stage_less_layers": first,
                        "parallelism.pipeline_parallel_last_stage_less_layers": last,
                        "parallelism.pipeline_parallel_layers_per_stage": lps}
    return {}


def torchtitan_notes(scenario, config) -> list[str]:
    """What torchtitan's options cannot say about the configuration (printed with the options)."""
    notes = []
    if config.pp > 1 and config.pp_schedule in ("zb1p", "zb2p") and config.pp_chunks == 1:
        notes.append(f"pp_schedule={config.pp_schedule}: torchtitan runs zero-bubble schedules as "
                     "InterleavedZeroBubble with at least 2 stages per rank (it runs 2 here); one stage per rank, "
                     "as priced, needs torch.distributed.pipelining directly (as autotune/workloads does)")
    if config.pp > 1 and config.pp_chunks > 2 and not _virtual_stage_fields(scenario.model.n_layers, config.pp,
                                                                           config.pp_chunks):
        notes.append(f"{scenario.model.n_layers} layers cannot be cut into {config.pp} x {config.pp_chunks} "
                     "virtual stages with pipeline_parallel_layers_per_stage: set "
                     "parallelism.module_fqns_per_model_part by hand (else torchtitan runs 2 stages per rank)")
    if config.pp > 1 and config.pp_schedule == "zb2p" and scenario.workload.optimizer_post_validation:
        notes.append("optimizer_post_validation: torchtitan has no post-update validation; its optimizer step "
                     "synchronises the stages, so this schedule keeps the step-end wait the price leaves out")
    if config.etp and config.etp != config.tp:
        notes.append(f"etp={config.etp}: set parallelism.expert_tensor_parallel_degree={config.etp} (not written by "
                     "this mapping, which covers the options in TORCHTITAN_OPTIONS; torchtitan takes it as 1 or tp)")
    return notes


def torchtitan_args(scenario, config) -> list[str]:
    """torchtitan 0.3.0 command-line options for the configuration and the scenario's batch (the
    module docstring's table); the recompute setting is a subcommand, so it comes last."""
    tt = torchtitan_fields(scenario, config)
    mode = tt.pop("activation_checkpoint.mode")
    if config.dp_flavour in ("fsdp", "hsdp"):
        tt["parallelism.fsdp_reshard_after_forward"] = _REGATHER_TO_RESHARD[scenario.workload.fsdp_regather]
    elif config.dp_flavour == "zero1":
        tt["parallelism.fsdp_reshard_after_forward"] = "never"
    # torchtitan runs local_batch_size sequences per forward and accumulates gradients up to the
    # global batch; under PP the local batch is cut into micro-batches of the microbatch size
    local = scenario.global_batch_seqs // config.dp if config.pp > 1 else config.micro_batch
    tt |= {"training.local_batch_size": local,
           "training.global_batch_size": scenario.global_batch_seqs, "training.seq_len": scenario.seq_len}
    tt |= _virtual_stage_fields(scenario.model.n_layers, config.pp, config.pp_chunks)
    flags = []
    if config.pp > 1 or config.ep > 1:
        # torchtitan 0.3.0's Trainer.Config._validate_cuda_graphs refuses CUDA graphs with pipeline
        # parallelism, and with most expert-parallel token dispatchers; the model prices no CUDA graphs
        flags.append("--training.disable_cuda_graphs")
    return [f"--{k}={v}" for k, v in tt.items()] + flags + [f"activation-checkpoint:{mode}"]
