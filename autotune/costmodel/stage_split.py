"""How pipeline stages share the layers and the head, as the frameworks split them (the
``ends`` and ``balanced`` layouts of ``WorkloadSpec.pipeline_layout``; ``terms.layers_on_rank``
keeps the even split's closed form). Run once per distinct (pp, virtual stages per rank,
stage-to-rank style) of a batch (``xp.per_pair``), never per row."""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np


class LossBlocks(NamedTuple):
    """Where nanotron's split puts the logits' fp32 cast and the loss (``rank_layers``), per row."""
    Ls_loss: object = -1.0   # layers on the loss's rank where it is not the head's, else -1
    hop16: object = 0.0      # 1 where the head's rank sends its logits (activation dtype) to the cast's
    hop32: object = 0.0      # 1 where the cast's rank sends them in fp32 to the loss's


def ends_split(L: int, stages: int) -> tuple[list[int], int]:
    """torchtitan's ``generate_llm_fqn_per_model_part`` (input_weight = output_weight = 1): L + 2
    units, floor((L + 2) / S) a stage and one more on the first (L + 2) mod S stages; the first
    stage's first unit is the embedding, the last stage's last is the head. Megatron-Core's
    --account-for-embedding/loss-in-pipeline-split is the same split where S divides L + 2.
    Returns the layers per virtual stage and the head's stage."""
    units = L + 2
    per, extra = divmod(units, stages)
    layers = [per + (1 if s < extra else 0) for s in range(stages)]
    layers[0] -= 1
    layers[-1] -= 1
    if min(layers) < 0:              # more stages than units: torchtitan refuses; keep every layer placed
        layers = [max(n, 0) for n in layers]
        layers[0] += L - sum(layers)
    return layers, stages - 1


def nanotron_split(L: int, stages: int, head_cost: float) -> tuple[list[int], int, int, int]:
    """nanotron's split by block cost (models/base.py ``build_model``): its pipeline blocks in
    order (the embedding, the layers, the final norm, the head, the fp32 cast of the logits, the
    loss; a layer costing 1, the head ``head_cost``, the others 0), each placed on the current
    stage, which is closed once the cumulative cost passes (total (r + 1) / S). Every block after
    the head sits at the total, past every threshold but the last: a head short of the last stage
    sends its logits to the cast on the next stage, and the cast its fp32 logits to the loss on
    the one after (both at most the last stage).
    Returns the layers per virtual stage and the stages of the head, the cast and the loss."""
    costs = np.cumsum([1.0] * L + [head_cost, 0.0, 0.0])
    total = costs[-1]
    layers, r, at = [0] * stages, 0, []
    for i, c in enumerate(costs):
        if i < L:
            layers[r] += 1
        else:
            at.append(r)
        if c > total * ((r + 1) / stages) and r < stages - 1:
            r += 1
    head, cast, loss = at
    return layers, head, cast, loss


def stage_layers(L: int, layout: str, head_cost: float, stages: int) -> tuple[list[int], int, int, int]:
    """Layers per virtual stage and the stages of the head, the fp32 cast and the loss of the
    ``ends`` or ``balanced`` layout (torchtitan computes the loss beside the head)."""
    if layout == "ends":
        layers, head = ends_split(L, stages)
        return layers, head, head, head
    return nanotron_split(L, stages, head_cost)


@lru_cache(maxsize=4096)
def rank_layers(L: int, layout: str, head_cost: float, pp: int, v: int, v_style: bool,
                loss_blocks: bool = False) -> tuple[float, float, float, float, float]:
    """(layers on the rank holding the most, layers on the rank holding the head, layers on the
    rank holding the loss where that is another rank (else -1), 1 where the head's rank sends its
    logits to another rank's fp32 cast, 1 where the cast sends fp32 logits to another rank's loss)
    for pp ranks of v virtual stages each: looping placement (stage s on rank s mod pp), or the V
    placement of ZBV / DualPipeV (v = 2: rank r holds stages r and 2 pp - 1 - r). The cast and the
    loss are blocks of their own only where ``loss_blocks`` (nanotron); elsewhere they run beside
    the head (Megatron-Core's layouts keep the loss with the output layer)."""
    stages = pp * v
    if stages <= 1:
        return float(L), float(L), -1.0, 0.0, 0.0
    layers, head, cast, loss = stage_layers(L, layout, head_cost, stages)
    if not loss_blocks:
        cast = loss = head
    owner = [(s if s < pp else 2 * pp - 1 - s) if v_style else s % pp for s in range(stages)]
    per_rank = [0] * pp
    for s, n in enumerate(layers):
        per_rank[owner[s]] += n
    h, c, lo = owner[head], owner[cast], owner[loss]
    return (float(max(per_rank)), float(per_rank[h]), float(per_rank[lo]) if lo != h else -1.0,
            float(c != h), float(lo != c))
