"""How pipeline stages share the layers and the head, as the frameworks split them (the
``ends`` and ``balanced`` layouts of ``WorkloadSpec.pipeline_layout``; ``terms.layers_on_rank``
keeps the even split's closed form). Run once per distinct (pp, virtual stages per rank,
stage-to-rank style) of a batch (``xp.per_pair``), never per row."""
from __future__ import annotations

from functools import lru_cache

import numpy as np


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


def nanotron_split(L: int, stages: int, head_cost: float) -> tuple[list[int], int, int]:
    """nanotron's split by block cost (models/base.py ``build_model``): blocks in order, each layer
    costing 1 and the head ``head_cost`` (the embedding, norm, fp32 cast and loss 0); a block goes to
    the current stage, which is closed once the cumulative cost passes (total (r + 1) / S). The
    head's block passes its stage's threshold unless it is on the last stage, so the fp32 cast and
    the loss then open the next stage, which receives the head's logits.
    Returns the layers per virtual stage, the head's stage and the loss's."""
    costs = np.cumsum([1.0] * L + [head_cost])
    total = costs[-1]
    layers, r = [0] * stages, 0
    for i, c in enumerate(costs):
        if i < L:
            layers[r] += 1
        else:
            head = r
        if c > total * ((r + 1) / stages) and r < stages - 1:
            r += 1
    return layers, head, r


def stage_layers(L: int, layout: str, head_cost: float, stages: int) -> tuple[list[int], int, int]:
    """Layers per virtual stage, the head's stage and the loss's stage of the ``ends`` or
    ``balanced`` layout (torchtitan computes the loss beside the head)."""
    if layout == "ends":
        layers, head = ends_split(L, stages)
        return layers, head, head
    return nanotron_split(L, stages, head_cost)


@lru_cache(maxsize=4096)
def rank_layers(L: int, layout: str, head_cost: float, pp: int, v: int, v_style: bool) -> tuple[float, float, float]:
    """(layers on the rank holding the most, layers on the rank holding the head, layers on the
    rank holding the loss where that is another rank, else -1) for pp ranks of v virtual stages
    each: looping placement (stage s on rank s mod pp), or the V placement of ZBV / DualPipeV
    (v = 2: rank r holds stages r and 2 pp - 1 - r)."""
    stages = pp * v
    if stages <= 1:
        return float(L), float(L), -1.0
    layers, head, loss = stage_layers(L, layout, head_cost, stages)
    owner = [(s if s < pp else 2 * pp - 1 - s) if v_style else s % pp for s in range(stages)]
    per_rank = [0] * pp
    for s, n in enumerate(layers):
        per_rank[owner[s]] += n
    apart = owner[loss] != owner[head]
    return float(max(per_rank)), float(per_rank[owner[head]]), float(per_rank[owner[loss]]) if apart else -1.0
