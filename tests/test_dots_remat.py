"""JAX rematerialisation that keeps the weight matmuls' outputs (WorkloadSpec.activation_memory =
dots, MaxText's remat_policy minimal_flash): what a micro-batch keeps under recompute selective."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autotune.validation as V
from autotune.costmodel import constants as C
from autotune.costmodel import evaluate
from autotune.specs import Config, build_scenario

from test_runs_schema import _write


def _llama(acts="dots", model="llama3-8b", **over):
    sets = [f"workload.activation_memory={acts}"] + [f"{k}={v}" for k, v in over.items()]
    return build_scenario(model, "single-building", gpus=8, overrides=sets)


def _mem(scen, mb, rc="selective", tp=1, dp=8):
    return evaluate(scen, Config(tp=tp, dp=dp, micro_batch=mb, recompute=rc), check=False).memory_per_gpu_bytes


def test_a_micro_batch_keeps_the_matmul_outputs_the_context_and_the_layer_input():
    """Each micro-batch more adds, per token and layer, 2 B x (the input, q, k, v, the context,
    the output projection's output, wi_0 and wi_1; not wo's output, which feeds only the residual
    add), computed here from the shape, and
    its logits on the head's rank (fused: LOGITS_BYTES a logit)."""
    s = _llama()
    m = s.model
    h, ffn, hd = m.hidden, m.ffn_hidden, m.hidden // m.n_heads
    elems = 2 * h + m.n_heads * hd + 2 * m.n_kv_heads * hd + m.n_heads * hd + 2 * ffn
    per_mb = 2.0 * s.seq_len * m.n_layers * elems + C.LOGITS_BYTES * s.seq_len * m.vocab
    assert _mem(s, 2) - _mem(s, 1) == pytest.approx(per_mb, rel=1e-9)
    assert _mem(s, 2, tp=2, dp=4) - _mem(s, 1, tp=2, dp=4) == pytest.approx(per_mb / 2, rel=1e-9)


def test_fp32_training_keeps_the_same_tensors_at_four_bytes():
    bf16, fp32 = _llama(), _llama(**{"workload.precision": "fp32"})
    logits = C.LOGITS_BYTES * bf16.seq_len * bf16.model.vocab
    d16 = _mem(bf16, 2) - _mem(bf16, 1) - logits     # the logits' bytes per logit do not change
    d32 = _mem(fp32, 2) - _mem(fp32, 1) - logits
    assert d16 > 0 and d32 == pytest.approx(2 * d16, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(["llama3-8b", "llama3-70b", "gpt3-175b"]), mb=st.integers(1, 4),
       tp=st.sampled_from([1, 2, 4, 8]))
def test_dots_keep_less_than_megatrons_selective_and_only_selective_differs(model, mb, tp):
    """The matmuls' outputs are fewer bytes than Korthikanti's selective count on these dense models;
    under recompute none and full the policy is not in play, so the memory is the fused one's."""
    dots, fused = _llama("dots", model), _llama("fused", model)
    assert _mem(dots, mb, tp=tp, dp=8 // tp) < _mem(fused, mb, tp=tp, dp=8 // tp)
    for rc in ("none", "full"):
        assert _mem(dots, mb, rc, tp=tp, dp=8 // tp) == _mem(fused, mb, rc, tp=tp, dp=8 // tp)
    cfg = Config(tp=tp, dp=8 // tp, micro_batch=mb, recompute="selective")
    assert evaluate(dots, cfg, check=False).iteration_time_s == evaluate(fused, cfg, check=False).iteration_time_s


def test_dots_with_megatron_modules_or_offloading_is_refused_in_one_line():
    for over in ({"workload.recompute_modules": "mlp"}, {"workload.offload_modules": "qkv_linear"}):
        with pytest.raises(Exception) as e:
            _llama("dots", **over)
        assert "dots" in str(e.value) and "\n" not in str(e.value).strip()


def test_jax_rows_keep_the_matmul_outputs_and_say_so(tmp_path):
    """A jax-class runs row is read as dots, printed under selective recomputation; a
    Megatron module list on it skips the row."""
    jax = {"model_name": "Llama-2-7B", "framework": "MaxText", "recompute": "selective"}
    rows = [jax, {**jax, "recompute": "full"}, {**jax, "framework": "megatron"},
            {**jax, "recompute_modules": "mlp"}]
    cases, skipped = V.read_runs(_write(tmp_path, rows))
    assert [c.scenario.workload.activation_memory for c in cases] == ["dots", "dots", "fused"]
    said = ["activation_memory=dots" in " ".join(c.assumptions) for c in cases]
    assert said == [True, False, False]
    assert len(skipped) == 1 and "recompute_modules mlp" in skipped[0]["reason"] and "dots" in skipped[0]["reason"]
