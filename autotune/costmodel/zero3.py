"""ZeRO-3 / FSDP collective counts by granularity (``WorkloadSpec.fsdp_gather``) and ZeRO-3's
second gather under full recomputation; ``terms.dp_comm_groups`` and ``iteration_formulas`` use
them."""
from __future__ import annotations

from . import constants as C
from .scenario_consts import FSDP_GATHER_MODULE, FSDP_GATHER_PARAMETER, ScenarioConsts


def fsdp_calls(k: ScenarioConsts, P, Ls, units, xp):
    """Reduce-scatters and all-gathers per pass of an FSDP / ZeRO-3 group holding P parameters in
    Ls layers (WorkloadSpec.fsdp_gather): unit, one of each per FSDP unit (``units``); parameter,
    one of each per parameter tensor (DeepSpeed <= v0.5: partition_parameters._allgather_param and
    one reduce_scatter per gradient); module, an all-gather per linear module, modules smaller than
    the prefetch bucket sharing one (DeepSpeed >= v0.6, all_gather_coalesced), and a reduce-scatter
    per reduce bucket (reduce_scatter_coalesced; ``constants.ZERO3_*_BUCKET_ELEMS``).
    Approximations: at least one gather per layer (a fetch starts at each layer's first module;
    the prefetch may in fact fold a small layer into its neighbour's call); the expert group counts
    its MoE layers with the dense layer's module and tensor counts (its local experts' weights
    share the calls); ``fsdp_unit_layers`` applies to ``unit`` only. The per-tensor copies are
    timed with the call (``dp_comm_groups``) and never hidden: ``iteration_formulas`` turns the
    FSDP overlap off under ``parameter`` (DeepSpeed <= v0.5 synchronized before each gather)."""
    if k.fsdp_gather == FSDP_GATHER_PARAMETER:
        n = Ls * k.layer_tensors
        return n, n
    if k.fsdp_gather == FSDP_GATHER_MODULE:
        per_layer = xp.minimum(xp.maximum(xp.ceil(P / xp.maximum(Ls, 1.0) / C.ZERO3_PREFETCH_BUCKET_ELEMS), 1.0),
                               k.layer_linears)
        return xp.maximum(1.0, xp.ceil(P / C.ZERO3_REDUCE_BUCKET_ELEMS)), xp.maximum(Ls, 1.0) * per_layer
    return units, units


def module_sizes(k: ScenarioConsts, tp) -> list:
    """A layer's linear modules' parameters per rank, in forward order (a TP-split module holds 1 / tp)."""
    return [n / tp if split else n for n, split in k.layer_modules]


def zero3_refetch_share(k: ScenarioConsts, tp, xp):
    """Share of a layer's parameters ZeRO-3 gathers a second time in the backward under full
    recomputation (``fsdp_gather`` module or parameter, DeepSpeed's coordinator): a module's
    parameters, released after its recompute forward, come back for its backward unless they are
    reused within ``constants.ZERO3_MAX_REUSE_DISTANCE_ELEMS`` of parameters traced after it, which
    are the modules after it in the forward and the same again in the backward (2 x their
    parameters, per rank: a TP-split module holds 1 / tp). GPT-3 175B at tp 1: QKV, output and fc1
    (2/3 of the layer) come back, fc2 stays; a layer under 5e8 parameters keeps everything."""
    sizes = module_sizes(k, tp)
    total = sum(sizes)
    again, after = 0.0, 0.0
    for size in reversed(sizes):
        again = again + xp.where(2.0 * after >= C.ZERO3_MAX_REUSE_DISTANCE_ELEMS, size, 0.0)
        after = after + size
    return again / total


def zero3_live_params(k: ScenarioConsts, tp, full_recompute, xp):
    """Parameters per rank that DeepSpeed ZeRO-3 holds gathered at its peak (``fsdp_gather``
    module or parameter; PartitionedParameterCoordinator.fetch_sub_module, at the DeepSpeed commit
    read in the fetched repository): the largest module running, plus what its prefetch gathers
    after it: tensors until their sum passes min(``stage3_max_live_parameters`` - gathered,
    ``stage3_prefetch_bucket_size``), so that budget plus at most one more tensor (bounded here by
    the largest module), and nothing where the running module alone passes the live limit (the
    530B model's 1.7e9-parameter fc1 at tp 1). Under full recomputation the modules it does not
    release between a layer's recompute forward and its backward (those reused within
    ``constants.ZERO3_MAX_REUSE_DISTANCE_ELEMS``, the complement of ``zero3_refetch_share``) come on
    top, counted whole (an upper bound: one of them may be the module running). Never more than
    the two layers a unit-granular FSDP prefetch holds (``memory_per_gpu``)."""
    sizes = module_sizes(k, tp)
    largest = sizes[0]
    for size in sizes[1:]:
        largest = xp.maximum(largest, size)
    budget = xp.minimum(C.ZERO3_MAX_LIVE_PARAMETERS_ELEMS - largest, C.ZERO3_PREFETCH_BUCKET_ELEMS)
    prefetch = xp.where(budget > 0.0, budget + largest, 0.0)
    kept = xp.where(full_recompute, (1.0 - zero3_refetch_share(k, tp, xp)) * sum(sizes), 0.0)
    return largest + prefetch + kept
