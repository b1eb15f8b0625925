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
    """The three fields ``layers_on_rank`` reads."""
    def __init__(self, L, layout, x=0.0):
        self.L, self.pp_layout, self.head_layer_equiv, self.moe_frac = float(L), layout, float(x), 0.0


def _layers(L, layout, pp, v=1, x=0.0):
    Ls, _, _, Ls_last = layers_on_rank(_K(L, layout, x), np.array([float(pp)]), np.array([float(v)]), NUMPY)
    return float(Ls[0]), float(Ls_last[0])


def test_ends_gives_the_first_and_last_stage_one_layer_fewer():
    """Qi et al. 2024's layouts: 22 layers over 8 stages hold 3 a stage and 2 beside the head;
    torchtitan's generate_llm_fqn_per_model_part gives the same for 32 layers over 8 (4 and 3)."""
    assert _layers(22, LAYOUT_ENDS, 8) == (3.0, 2.0)
    assert _layers(62, LAYOUT_ENDS, 32) == (2.0, 1.0)
    assert _layers(32, LAYOUT_ENDS, 8) == (5.0, 3.0)       # 34 units: 5 on the first two stages, 4 elsewhere
    assert _layers(22, LAYOUT_EVEN, 8) == (3.0, 3.0)
    assert _layers(22, LAYOUT_ENDS, 1) == (22.0, 22.0)     # one stage holds everything


def test_balanced_leaves_the_head_stage_as_light_as_it_pays():
    """A head worth 1.85 layers (GPT 1.5B, vocab 51,200): 21 layers over 7 stages and 1 beside
    the head (1 + 1.85 <= 3); a negligible head keeps the even split."""
    assert _layers(22, LAYOUT_BALANCED, 8, x=1.85) == (3.0, 1.0)
    assert _layers(32, LAYOUT_BALANCED, 4, x=0.05) == (8.0, 8.0)


@settings(max_examples=300, deadline=None)
@given(L=st.integers(2, 160), pp=st.integers(1, 32), v=st.sampled_from([1, 2, 3, 4]),
       x=st.floats(0.0, 12.0, allow_nan=False))
def test_balanced_is_never_heavier_than_even_or_ends(L, pp, v, x):
    """The balanced split's heavier rank, in layer units (the head x), never exceeds the even
    split's or the ends split's, and every layout places every layer."""
    if pp * v > L:
        return

    def load(layout):
        Ls, last = _layers(L, layout, pp, v, x)
        assert Ls >= L / (pp * v) * v - 1e-9 and last <= Ls
        return max(Ls, last + x) if pp * v > 1 else L + x
    bal, even, ends = load(LAYOUT_BALANCED), load(LAYOUT_EVEN), load(LAYOUT_ENDS)
    assert bal <= even + 1e-9 and bal <= ends + 1e-9


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
    (constants.CROSS_ENTROPY_*), tokens x vocab / tp logits a rank, at the HBM's rate."""
    from autotune.costmodel import constants as C
    from autotune.costmodel.params import default_params
    from autotune.costmodel.scenario_consts import scenario_consts
    from autotune.costmodel.terms import compute_terms
    from autotune.costmodel.xp import SCALAR
    scen = _gpt_small(global_batch_seqs=64)
    k = scenario_consts(scen, default_params())
    ct = compute_terms(k, default_params(), 2, 1, 1, 1, 1, SCALAR)
    logits = 2 * scen.seq_len * 51200
    assert ct.loss_f == pytest.approx(C.CROSS_ENTROPY_FWD_TRAFFIC_BYTES_PER_LOGIT * logits / k.hbm_Bps)
    assert ct.loss_b == pytest.approx(C.CROSS_ENTROPY_BWD_TRAFFIC_BYTES_PER_LOGIT * logits / k.hbm_Bps)
    ct2 = compute_terms(k, default_params(), 2, 1, 2, 1, 2, SCALAR)
    assert ct2.loss_f == pytest.approx(ct.loss_f / 2)


def test_unknown_layout_is_a_one_line_error():
    with pytest.raises(Exception) as e:
        _gpt_small(pipeline_layout="zigzag")
    assert "pipeline_layout" in str(e.value)


def test_launch_flags_name_the_layout():
    from autotune.launch import megatron_args
    c = Config(tp=1, pp=4, dp=2, dp_flavour="ddp", pp_schedule="1f1b", micro_batch=1)
    ends, _ = megatron_args(_gpt_small(pipeline_layout="ends"), c)
    assert "--account-for-loss-in-pipeline-split" in ends
    bal, _ = megatron_args(_gpt_small(pipeline_layout="balanced"), c)
    assert any(a.startswith("--decoder-last-pipeline-num-layers ") for a in bal)
    even, _ = megatron_args(_gpt_small(), c)
    assert not any("pipeline-split" in a or "decoder-last" in a for a in even)
