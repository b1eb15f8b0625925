"""Pipeline layouts (WorkloadSpec.pipeline_layout) and the loss over the head's logits: the
stage holding the head carries it in its compute (docs/cost_model.md, "Pipeline layout")."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel import evaluate
from autotune.costmodel.scenario_consts import LAYOUT_BALANCED, LAYOUT_ENDS, LAYOUT_EVEN
from autotune.costmodel.terms import layers_on_rank
from autotune.costmodel.xp import NUMPY
from autotune.specs import Config, build_scenario


class _K:
    """The fields ``layers_on_rank`` reads."""
    def __init__(self, L, layout, x=0.0):
        self.L, self.pp_layout, self.head_layer_equiv, self.moe_frac = float(L), layout, float(x), 0.0
        self.loss_blocks = True


def _layers(L, layout, pp, v=1, x=0.0, v_style=False):
    Ls, _, _, Ls_last, _ = layers_on_rank(_K(L, layout, x), np.array([float(pp)]), np.array([float(v)]),
                                       np.array([v_style]), NUMPY)
    return float(Ls[0]), float(Ls_last[0])


def test_ends_gives_the_first_and_last_stage_one_layer_fewer():
    """Qi et al. 2024's layouts: 22 layers over 8 stages hold 3 a stage and 2 beside the head;
    torchtitan's generate_llm_fqn_per_model_part: 32 layers over 8 stages hold 4 on stages 1 and 2
    (34 units, the 2 extra on the first stages, the first giving one to the embedding), 3 beside
    the head; 30 layers over 2 stages hold 15 each."""
    assert _layers(22, LAYOUT_ENDS, 8) == (3.0, 2.0)
    assert _layers(62, LAYOUT_ENDS, 32) == (2.0, 1.0)
    assert _layers(32, LAYOUT_ENDS, 8) == (5.0, 3.0)
    assert _layers(30, LAYOUT_ENDS, 2) == (15.0, 15.0)
    assert _layers(32, LAYOUT_ENDS, 2, v=2) == (16.0, 16.0)
    assert _layers(22, LAYOUT_EVEN, 8) == (3.0, 3.0)
    assert _layers(22, LAYOUT_ENDS, 1) == (22.0, 22.0)     # one stage holds everything


def test_balanced_is_nanotrons_split():
    """nanotron's build_model: 30 layers and a head worth 2 over 4 ranks -> [9, 8, 8, 5] (the first
    rank overshoots its threshold); 22 layers and a head worth 1.85 over 8 -> 1 beside the head."""
    assert _layers(30, LAYOUT_BALANCED, 4, x=2.0) == (9.0, 5.0)
    assert _layers(22, LAYOUT_BALANCED, 8, x=1.85) == (3.0, 1.0)


def _torchtitan(L, S):
    """torchtitan's generate_llm_fqn_per_model_part, written out: module names per stage."""
    per, extra = divmod(L + 2, S)
    names, cur = [], 0
    for s in range(S):
        units = per + (1 if s < extra else 0)
        mods = []
        if s == 0:
            mods.append("tok_embeddings")
            units -= 1
        if s == S - 1:
            units -= 1
        mods += [f"layers.{i}" for i in range(cur, cur + max(units, 0))]
        cur += max(units, 0)
        if s == S - 1:
            mods += ["norm", "output"]
        names.append(mods)
    return names


def _nanotron(L, S, x):
    """nanotron's build_model loop, written out: the rank of every block."""
    blocks = ["token_embedding"] + [f"decoder{i}" for i in range(L)] + ["final_layer_norm", "lm_head", "cast_to_fp32",
                                                                         "loss"]
    cost = {"lm_head": x, **{f"decoder{i}": 1.0 for i in range(L)}}
    cum = np.cumsum([cost.get(b, 0.0) for b in blocks])
    thresholds = [cum[-1] * ((r + 1) / S) for r in range(S)]
    rank, out = 0, {}
    for b, c in zip(blocks, cum):
        out[b] = rank
        if c > thresholds[rank]:
            rank += 1
    return out


@settings(max_examples=300, deadline=None)
@given(L=st.integers(2, 130), pp=st.integers(2, 32), v=st.sampled_from([1, 2, 3, 4]), v_style=st.booleans(),
       x=st.floats(0.0, 6.0, allow_nan=False))
def test_the_splits_match_the_frameworks_code(L, pp, v, v_style, x):
    """Layers on the busiest rank and beside the head equal what torchtitan's and nanotron's own
    loops give (written out above), for looping and V placements; every layer is placed once."""
    if v_style:
        v = 2
    S = pp * v
    if S > L:
        return
    owner = [(s if s < pp else 2 * pp - 1 - s) if v_style else s % pp for s in range(S)]
    per_rank = [0] * pp
    for s, mods in enumerate(_torchtitan(L, S)):
        per_rank[owner[s]] += sum(m.startswith("layers.") for m in mods)
    assert sum(per_rank) == L
    assert _layers(L, LAYOUT_ENDS, pp, v, v_style=v_style) == (max(per_rank), per_rank[owner[S - 1]])
    ranks = _nanotron(L, S, x)
    per_rank = [0] * pp
    for i in range(L):
        per_rank[owner[ranks[f"decoder{i}"]]] += 1
    assert _layers(L, LAYOUT_BALANCED, pp, v, x=x, v_style=v_style) == (max(per_rank),
                                                                          per_rank[owner[ranks["lm_head"]]])
    # the fp32 cast and the loss: where nanotron's loop puts them (blocks of their own), the ranks
    # the logits travel between; beside the head where they are not blocks (Megatron-Core, torchtitan)
    from autotune.costmodel.stage_split import rank_layers
    h, c, lo = (owner[ranks[b]] for b in ("lm_head", "cast_to_fp32", "loss"))
    want = (-1.0 if lo == h else float(per_rank[lo]), float(c != h), float(lo != c))
    assert rank_layers(L, "balanced", float(x), pp, v, v_style, True)[2:] == want
    assert rank_layers(L, "balanced", float(x), pp, v, v_style, False)[2:] == (-1.0, 0.0, 0.0)
    assert rank_layers(L, "ends", float(x), pp, v, v_style, True)[2:] == (-1.0, 0.0, 0.0)


def test_a_loss_on_its_own_rank_paces_the_pipeline_by_its_logits_link():
    """nanotron's split of a 32-layer, 131k-vocabulary model over 16 stages puts the head on stage
    14, the fp32 cast and the loss on 15, which receives each micro-batch's logits: the pace is at
    least their transfer, the head's rank no longer runs the loss, a slower scale-out link (a stage
    fills a node of 8) makes the step longer; a head two stages short adds the fp32 hop. Megatron-Core's
    balanced layout keeps the loss with the head: no such link."""
    from autotune.costmodel.stage_split import nanotron_split
    layers, head, cast, loss = nanotron_split(32, 16, 2.21)
    assert (head, cast, loss, layers[15]) == (14, 15, 15, 0)
    assert nanotron_split(32, 4, 2.21)[1:] == (3, 3, 3)
    assert nanotron_split(16, 16, 3.9)[1:] == (12, 13, 14)      # the 1B's weights at pp 16: two hops

    def step(nic_Bps, framework="nanotron", layout="balanced", tp=1):
        over = ["model.n_layers=32", "model.vocab=131072", f"cluster.scale_out.bandwidth_Bps={nic_Bps}",
                f"workload.pipeline_layout={layout}", f"workload.framework={framework}",
                "workload.global_batch_seqs=256"]
        s = build_scenario("llama3-8b", "single-building", gpus=128, overrides=over)
        return s, evaluate(s, Config(tp=tp, pp=16, dp=8 // tp, dp_flavour="zero1", pp_schedule="1f1b", micro_batch=1))
    scen, fast = step(50e9)
    _, slow = step(5e9)
    assert slow.iteration_time_s > fast.iteration_time_s
    logits_s = scen.seq_len * 131072 * 2 / 5e9       # one micro-batch's bf16 logits at the scale-out line rate
    assert slow.iteration_time_s >= 32 * logits_s    # 32 micro-batches a pipeline
    _, tp2 = step(5e9, tp=2)                          # half the vocabulary a rank: half the hop
    assert tp2.iteration_time_s < slow.iteration_time_s
    _, mega = step(5e9, framework="megatron")
    assert mega.iteration_time_s < 32 * logits_s     # the loss beside the head: no logits hop
    assert step(5e9, layout="ends")[1].iteration_time_s < slow.iteration_time_s


def test_the_heads_rank_drops_the_loss_that_moved():
    from autotune.costmodel.compute_pass import pass_compute
    from autotune.costmodel.params import default_params
    from autotune.costmodel.scenario_consts import scenario_consts
    from autotune.costmodel.terms import layout
    from autotune.configbatch import scalar_row
    from autotune.costmodel.xp import SCALAR
    p = default_params()
    row = scalar_row(Config(tp=1, pp=16, dp=8, dp_flavour="zero1", pp_schedule="1f1b", micro_batch=1))
    out = {}
    for fw in ("nanotron", "megatron"):
        s = build_scenario("llama3-8b", "single-building", gpus=128, overrides=[
            "model.n_layers=32", "model.vocab=131072", "workload.pipeline_layout=balanced", f"workload.framework={fw}"])
        k = scenario_consts(s, p)
        lay = layout(k, row, SCALAR)
        pc = pass_compute(k, p, row, lay, SCALAR, 1.0, 1.0, 1.0, 1.0, 1.0, 0)
        out[fw] = (pc, k.compute_scale, lay)
    (nano, f_n, lay_n), (mega, f_m, _) = out["nanotron"], out["megatron"]
    assert lay_n.loss.Ls_loss == 0.0 and lay_n.loss.hop16 == 1.0 and lay_n.loss.hop32 == 0.0
    assert nano.loss_floor > 0.0 and mega.loss_floor == 0.0
    # the head's rank (the bottleneck here: 2 layers and the head) runs the loss only under Megatron
    assert mega.t_f / f_m - nano.t_f / f_n == pytest.approx(nano.ct.loss_f)
    assert mega.t_b / f_m - nano.t_b / f_n == pytest.approx(nano.ct.loss_b)


def _gpt_small(**workload):
    over = ["model.n_layers=22", "model.hidden=2304", "model.n_heads=24", "model.n_kv_heads=24",
            "model.ffn_hidden=9216", "model.vocab=51200"] + [f"workload.{k}={v}" for k, v in workload.items()]
    return build_scenario("llama3-8b", "single-building", gpus=8, overrides=over)


def test_a_lighter_head_stage_shortens_the_pipeline():
    """Same model and configuration: ends and balanced finish a step sooner than even (the head no
    longer sits on a full stage), and the layout changes nothing without pipeline parallelism."""
    c = Config(tp=1, pp=8, dp=1, dp_flavour="ddp", pp_schedule="1f1b", micro_batch=2)
    t = {lay: evaluate(_gpt_small(global_batch_seqs=64, pipeline_layout=lay), c).iteration_time_s
         for lay in ("even", "ends", "balanced")}
    assert t["balanced"] <= t["ends"] < t["even"]
    c1 = Config(tp=1, pp=1, dp=8, dp_flavour="ddp", micro_batch=2)
    t1 = {lay: evaluate(_gpt_small(global_batch_seqs=64, pipeline_layout=lay), c1).iteration_time_s
          for lay in ("even", "balanced")}
    assert t1["even"] == t1["balanced"]


def test_the_framework_class_sets_the_default_layout():
    assert _gpt_small().workload.resolved_pipeline_layout == "even"
    assert _gpt_small(framework="nanotron").workload.resolved_pipeline_layout == "balanced"
    assert _gpt_small(framework="nanotron", pipeline_layout="even").workload.resolved_pipeline_layout == "even"
    assert _gpt_small().key == build_scenario("llama3-8b", "single-building", gpus=8, overrides=[
        "model.n_layers=22", "model.hidden=2304", "model.n_heads=24", "model.n_kv_heads=24",
        "model.ffn_hidden=9216", "model.vocab=51200"]).key
    assert _gpt_small(pipeline_layout="ends").key != _gpt_small().key


def test_the_loss_over_the_logits_is_priced_per_logit():
    """The cross-entropy's memory-bound passes: 38 B a logit forward and 14 B backward
    (constants.CROSS_ENTROPY_*), tokens x vocab / tp logits a rank, at the rate a streaming kernel
    sustains (the datasheet HBM bandwidth x HBM_ACHIEVED_FRACTION)."""
    from autotune.costmodel import constants as C
    from autotune.costmodel.params import default_params
    from autotune.costmodel.scenario_consts import scenario_consts
    from autotune.costmodel.terms import compute_terms
    from autotune.costmodel.xp import SCALAR
    scen = _gpt_small(global_batch_seqs=64)
    k = scenario_consts(scen, default_params())
    ct = compute_terms(k, default_params(), 2, 1, 1, 1, 1, SCALAR)
    logits = 2 * scen.seq_len * 51200
    rate = k.hbm_Bps * C.HBM_ACHIEVED_FRACTION
    assert ct.loss_f == pytest.approx(C.CROSS_ENTROPY_FWD_TRAFFIC_BYTES_PER_LOGIT * logits / rate)
    assert ct.loss_b == pytest.approx(C.CROSS_ENTROPY_BWD_TRAFFIC_BYTES_PER_LOGIT * logits / rate)
    ct2 = compute_terms(k, default_params(), 2, 1, 2, 1, 2, SCALAR)
    assert ct2.loss_f == pytest.approx(ct.loss_f / 2)


def test_unknown_layout_is_a_one_line_error():
    with pytest.raises(Exception) as e:
        _gpt_small(pipeline_layout="zigzag")
    assert "pipeline_layout" in str(e.value)


def test_launch_flags_name_the_layout():
    """ends: Megatron-Core's --account-for-* flags where the stages divide L + 2, else the split as
    a note; balanced: nanotron's split as a note; even: neither."""
    from autotune.launch import megatron_args
    c = Config(tp=1, pp=4, dp=2, dp_flavour="ddp", pp_schedule="1f1b", micro_batch=1)
    ends, _ = megatron_args(_gpt_small(pipeline_layout="ends"), c)           # 22 + 2 = 24 over 4
    assert "--account-for-loss-in-pipeline-split" in ends
    c8 = c.model_copy(update={"pp": 8, "dp": 1})
    args, notes = megatron_args(_gpt_small(pipeline_layout="ends", **{"global_batch_seqs": 64}), c8)
    assert "--account-for-loss-in-pipeline-split" in args                      # 24 over 8
    args, notes = megatron_args(_gpt_small(pipeline_layout="balanced"), c)
    assert not any("pipeline-split" in a for a in args) and any("pipeline_layout=balanced" in n for n in notes)
    even, notes = megatron_args(_gpt_small(), c)
    assert not any("pipeline-split" in a for a in even) and not any("pipeline_layout" in n for n in notes)
