"""The runs CSV's optional columns and free-text spellings (issue 13, item 1): what a published
run states is used, what it leaves unstated is assumed by a named rule and printed with the row,
and a value that cannot be read skips the row with its column and value."""
from __future__ import annotations

import csv
import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from autotune.costmodel.constants import hbm_bytes_of_nominal_gb

import autotune.validation as V
from autotune.cli import main
from autotune.costmodel.params import CostParams
from autotune.validation.columns import (gpu_memory_gb, map_activation, map_attention, map_convention,
                                         map_flavour, map_framework)

BASE = {
    "source": "Example et al. 2025 Table 1", "model_name": "Test-MoE", "n_layers": "24", "hidden": "2048",
    "ffn_hidden": "8192", "n_heads": "16", "n_kv_heads": "4", "vocab": "32000", "seq_len": "4096",
    "gpu_type": "H100-SXM5-80GB", "n_gpus": "64", "tp": "2", "pp": "1", "dp": "32", "cp": "1",
    "micro_batch": "1", "global_batch_seqs": "256", "recompute": "none", "precision": "bf16",
    "zero_or_fsdp": "zero1", "measured_metric": "tokens_per_sec_per_gpu", "measured_value": "10000",
}


def _write(tmp_path, rows):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(V.COLUMNS), extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({**BASE, **r})
    p = tmp_path / "runs.csv"
    p.write_text(buf.getvalue())
    return p


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("text, want", [
    ("ZeRO-2", "zero2"), ("zero_stage 2", "zero2"), ("zero_stage: 2", "zero2"), ("zero_stage=1", "zero1"),
    ("ZeRO stage: 3", "fsdp"), ("ZeRO stage 1", "zero1"), ("dist-opt", "zero1"), ("Megatron distributed optimizer", "zero1"),
    ("stage 3", "fsdp"), ("FSDP (FULL_SHARD)", "fsdp"), ("zero3 (no optimizer offload in the recipe)", "fsdp"),
    ("no reshard", "fsdp_noreshard"), ("FSDP SHARD_GRAD_OP", "fsdp_noreshard"),
    ("reshard_after_forward=False", "fsdp_noreshard"), ("HYBRID_SHARD", "hsdp"), ("hsdp", "hsdp"),
    ("none", "ddp"), ("ZeRO-0", "ddp"), ("DDP", "ddp"), ("zero3 + CPU optimizer offload", "offload"),
])
def test_flavour_spellings(text, want):
    assert map_flavour(text) == want


def test_other_spellings():
    assert [map_activation(t) for t in ("SwiGLU", "silu-glu", "GeGLU", "squared ReLU", "relu^2", "GELU", "ReLU")] == \
        ["swiglu", "swiglu", "geglu", "squared_relu", "squared_relu", "gelu", "relu"]
    assert map_activation("banana") is None
    assert [map_attention(t) for t in ("MLA", "multi-head latent", "GQA", "MQA", "MHA")] == \
        ["mla", "mla", "gqa", "gqa", "gqa"]
    assert [map_framework(t) for t in ("Megatron-DeepSpeed", "NeMo 24.05", "torchtitan", "Composer", "nanotron",
                                       "MaxText", "DeepSpeed", "other:custom")] == \
        ["megatron", "megatron", "pytorch", "pytorch", "nanotron", "jax", "deepspeed", "other"]
    # other:NAME is read by NAME first: a known framework's class, else other
    assert [map_framework(t) for t in ("other:InternEvo", "other:MegaScale (Megatron-LM based)", "other:colossalai",
                                       "Other: Lit-GPT (Lightning Fabric FSDP)")] == \
        ["pytorch", "megatron", "pytorch", "pytorch"]
    assert map_convention("HFU (recompute counted)") == "hardware" and map_convention("model FLOPs") == "model"
    assert gpu_memory_gb("A100-SXM4-40GB") == 40 and gpu_memory_gb("H100 80 GB") == 80
    assert gpu_memory_gb("H100-SXM") is None


def test_explicit_columns_reach_the_scenario(tmp_path):
    p = _write(tmp_path, [{"moe_experts": "64", "moe_topk": "6", "expert_ffn_hidden": "1408", "moe_shared_experts": "2",
                           "first_k_dense": "1", "ep": "8", "head_dim": "192", "activation": "SwiGLU",
                           "framework": "torchtitan", "hbm_gb": "94", "hbm_tbps": "3.9", "nic_gbps": "200",
                           "sliding_window": "1024", "sliding_window_layers": "12"}])
    (case,), skipped = V.read_runs(p)
    assert not skipped
    m, hw = case.scenario.model, case.scenario.cluster.buildings[0].gpu
    assert (m.moe_ffn_hidden, m.moe_shared_experts, m.first_k_dense, m.head_dim) == (1408, 2, 1, 192)
    assert (m.sliding_window, m.sliding_window_layers, m.activation) == (1024, 12, "swiglu")
    assert case.scenario.workload.framework == "pytorch"
    assert hw.hbm_bytes == hbm_bytes_of_nominal_gb(94) and hw.hbm_bandwidth_Bps == 3.9e12 and hw.nic_bandwidth_Bps == 200e9 / 8
    assert not any(a.startswith(("expert_ffn_hidden", "activation", "framework")) for a in case.assumptions)
    # a torchtitan MoE row combines by atomic scatter-add, and the row says it assumes so
    assert case.scenario.workload.resolved_moe_unpermute == "scatter_add"
    assert any(a.startswith("moe_unpermute=scatter_add (the pytorch class's own") for a in case.assumptions)


def test_mla_columns(tmp_path):
    p = _write(tmp_path, [{"attention": "MLA", "head_dim": "128", "q_lora_rank": "1536", "kv_lora_rank": "512",
                           "qk_rope_head_dim": "64", "v_head_dim": "128", "hidden": "7168", "n_heads": "128",
                           "n_kv_heads": "128", "tp": "1", "dp": "64"}])
    (case,), _ = V.read_runs(p)
    m = case.scenario.model
    assert m.attention == "mla" and m.qk_head_dim == 192 and m.kv_lora_rank == 512


def test_unstated_values_are_assumed_by_rule_and_printed(tmp_path):
    p = _write(tmp_path, [{"ffn_hidden": "", "vocab": "", "zero_or_fsdp": "", "recompute": "", "micro_batch": "",
                           "model_name": "Llama-ish 1B", "measured_metric": "mfu_pct", "measured_value": "40"}])
    (case,), _ = V.read_runs(p)
    text = "; ".join(case.assumptions)
    for needle in ("ffn_hidden=8192", "vocab=51200", "activation=swiglu (from the model name)",
                   "zero_or_fsdp=zero1 (not stated; megatron's default)", "framework=megatron (not stated)", "flops_convention=model"):
        assert needle in text, text
    code, out, _ = _cli("validate", "--runs", str(p))
    assert code == 0 and "assumed:" in out and "recompute=" in out and "(the fastest that fits)" in out
    code, out, _ = _cli("validate", "--runs", str(p), "--json")
    row = json.loads(out)["rows"][0]
    assert any("micro_batch=" in a for a in row["assumptions"])


def test_hardware_convention_counts_recomputation(tmp_path):
    row = {"measured_metric": "tflops_per_gpu", "measured_value": "300", "recompute": "full"}
    model = V.score(V.read_runs(_write(tmp_path, [{**row, "flops_convention": "model"}]))[0], CostParams())[0]
    hw = V.score(V.read_runs(_write(tmp_path, [{**row, "flops_convention": "HFU"}]))[0], CostParams())[0]
    assert hw["predicted"] == pytest.approx(model["predicted"] * 4 / 3, rel=0.02)


@pytest.mark.parametrize("col, value, why", [
    ("activation", "banana", "activation"), ("framework", "my-own-stack", "framework"),
    ("flops_convention", "sometimes", "flops_convention"), ("hbm_gb", "-3", "hbm_gb"),
    ("attention", "linear", "attention"), ("zero_or_fsdp", "zero3 + CPU offload", "CPU offload"),
    ("tp", "16", "NVLink domain"), ("expert_ffn_hidden", "abc", "expert_ffn_hidden"),
])
def test_unreadable_values_skip_the_row_naming_column_and_value(tmp_path, col, value, why):
    extra = {"moe_experts": "8", "moe_topk": "2"} if col == "expert_ffn_hidden" else {}
    if col == "tp":
        extra = {"n_gpus": "64", "dp": "4", "n_kv_heads": "16"}
    p = _write(tmp_path, [{}, {col: value, **extra}])
    cases, skipped = V.read_runs(p)
    assert len(cases) == 1 and len(skipped) == 1
    assert why in skipped[0]["reason"] and skipped[0].get("column") == col and skipped[0].get("value") == value


def test_gb200_jobs_that_do_not_fill_racks_use_equal_parts(tmp_path):
    p = _write(tmp_path, [{"gpu_type": "GB200 NVL72", "n_gpus": "128", "tp": "1", "dp": "128"}])
    (case,), _ = V.read_runs(p)
    assert case.scenario.cluster.buildings[0].gpu.nvlink_domain_gpus == 64
    assert any("NVLink domain of 64 GPUs" in a for a in case.assumptions)


def test_reserved_runs_are_scored_never_fit():
    code, out, _ = _cli("validate", "--runs", "reserved", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["n"] >= 100
    fams = {r["family"] for r in d["rows"]}
    assert {"NVIDIA/dgxc-benchmarking", "Llama 3"} <= fams
    for flags in (("--fit",), ("--loso",)):
        code, _, err = _cli("validate", "--runs", "reserved", *flags)
        assert code == 2 and "independent check" in err and "Traceback" not in err


def test_no_reserved_source_in_the_published_set():
    """The sources issue 13 reserves as an independent check are never in the fitted set."""
    reserved = ("dgxc-benchmarking", "megatron-bridge", "automodel", "torchtitan", "llama 3", "arxiv:2407.21783",
                "nemotron-4", "mt-nlg", "bloom", "opt-175b", "gpt-neox", "arxiv:2412.19437")
    with open(V.shipped_runs_path()) as f:
        for r in csv.DictReader(f):
            src = r["source"].lower()
            assert not any(k in src for k in reserved), r["source"]


def test_a_framework_class_without_rows_runs_at_the_measured_class_speed(tmp_path):
    """Only Megatron measured: every other class takes its fitted factor (not 1.0, the isolated
    kernels' speed, which no training step reaches)."""
    p = _write(tmp_path, [{"framework": "megatron-lm", "measured_value": str(v)} for v in (9000, 10000, 11000)])
    cases, _ = V.read_runs(p)
    params, _ = V.fit_params(cases=cases)
    mega = params.framework_efficiency_megatron
    assert mega != 1.0
    for fw in ("deepspeed", "pytorch", "nanotron", "jax", "other"):
        assert getattr(params, f"framework_efficiency_{fw}") == mega


def test_megatron_unmeasured_is_no_faster_than_the_fastest_measured_class():
    from autotune.costmodel.params import CostParams
    from autotune.validation.fit import with_framework_prior
    p = CostParams().with_values(framework_efficiency_pytorch=0.7, framework_efficiency_jax=0.6)
    out = with_framework_prior(p, ["framework_efficiency_pytorch", "framework_efficiency_jax"])
    assert out.framework_efficiency_megatron == 0.7
    assert out.framework_efficiency_nanotron == pytest.approx((0.7 * 0.6) ** 0.5)


@pytest.mark.parametrize("text, want", [
    ("even", "even"), ("uniform", "even"), ("Megatron default", "even"), ("ends", "ends"),
    ("first/last stage one layer fewer", "ends"), ("--account-for-embedding-in-pipeline-split", "ends"),
    ("input_weight=1, output_weight=1", "ends"), ("balanced", "balanced"), ("split by compute cost", "balanced"),
    ("by FLOPs", "balanced"), ("torchtitan default", "ends"), ("nanotron default", "balanced"),
    ("embedding and head count as a layer each", "ends"), ("uneven", None), ("unbalanced", None),
    ("imbalanced", None), ("not balanced", None), ("input_weight=0", None),
])
def test_pipeline_layout_spellings(text, want):
    from autotune.validation.columns import map_pipeline_layout
    assert map_pipeline_layout(text) == want


def test_pipeline_layout_column_and_its_defaults(tmp_path):
    """Stated: used. Unstated with pp > 1: torchtitan's ends, nanotron's balanced, else even,
    printed with the row; a value that names no layout skips the row."""
    pp = {"pp": "4", "dp": "8", "pipeline_schedule": "1F1B"}
    p = _write(tmp_path, [{**pp, "pipeline_layout": "first and last stage one layer fewer"},
                          {**pp, "framework": "torchtitan"}, {**pp, "framework": "nanotron"}, {**pp},
                          {**pp, "pipeline_layout": "zigzag"}])
    cases, skipped = V.read_runs(p)
    assert [c.scenario.workload.resolved_pipeline_layout for c in cases] == ["ends", "ends", "balanced", "even"]
    assert not any(a.startswith("pipeline_layout") for a in cases[0].assumptions)
    assert "pipeline_layout=ends (not stated; torchtitan's default)" in cases[1].assumptions
    assert "pipeline_layout=balanced (not stated; nanotron's default)" in cases[2].assumptions
    assert len(skipped) == 1 and skipped[0]["column"] == "pipeline_layout" and skipped[0]["value"] == "zigzag"


def test_unstated_micro_batch_of_a_megatron_moe_row_is_the_recipes_one(tmp_path):
    """Megatron-class MoE rows without a micro-batch take the MoE model zoo's MBS=1, printed as such;
    a dense row, or another framework class, still takes the fastest that fits."""
    moe = {"moe_experts": "8", "moe_topk": "2", "micro_batch": "", "zero_or_fsdp": "fsdp", "framework": "megatron-core"}
    p = _write(tmp_path, [moe, {**moe, "framework": "torchtitan"}, {**moe, "moe_experts": "", "moe_topk": ""}])
    code, out, _ = _cli("validate", "--runs", str(p), "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert rows[0]["micro_batch"] == 1
    assert any("micro_batch=1 (the Megatron-MoE recipes)" in a for a in rows[0]["assumptions"])
    for r in rows[1:]:
        assert any("(the fastest that fits)" in a for a in r["assumptions"] if a.startswith("micro_batch=")), r


def test_causal_flops_convention_counts_half_the_attention(tmp_path):
    """MaxText counts attention for the causal half (12 h L d s^2 / 2): the same run's TFLOP/s under
    "model causal" is the model convention's less half the attention core's FLOPs."""
    from autotune.validation.predict import attention_model_flops
    assert map_convention("model FLOPs, causal attention") == "model_causal"
    assert map_convention("MFU (6N + full attention)") == "model"
    assert map_convention("model FLOPs, full (non-causal) attention") == "model"
    assert map_convention("noncausal") == "model" and map_convention("non causal") == "model"
    row = {"measured_metric": "tflops_per_gpu", "measured_value": "400", "moe_experts": "", "moe_topk": ""}
    p = _write(tmp_path, [{**row, "flops_convention": "model"}, {**row, "flops_convention": "model causal"}])
    (full, causal), _ = V.read_runs(p)
    assert causal.flops_convention == "model_causal"
    code, out, _ = _cli("validate", "--runs", str(p), "--json")
    a, b = json.loads(out)["rows"]
    from autotune.costmodel import evaluate
    s = full.scenario
    iteration_s = evaluate(s, full.config, check=False).iteration_time_s
    assert a["feasible"] and 0.5 < b["predicted"] / a["predicted"] < 1.0
    # the model convention's attention: 12 L B s^2 heads d (twice MaxText's causal 12 h L d s^2 / 2)
    m = s.model
    assert attention_model_flops(s) == pytest.approx(
        12 * m.n_layers * s.global_batch_seqs * s.seq_len**2 * m.n_heads * (m.hidden // m.n_heads))
    # the difference is half the attention core's FLOPs over the same iteration time
    assert (a["predicted"] - b["predicted"]) * 1e12 * iteration_s * s.n_gpus == pytest.approx(
        0.5 * attention_model_flops(s), rel=1e-6)


def test_unstated_schedule_of_a_dense_megatron_row_is_the_fastest_that_fits(tmp_path):
    """A dense Megatron-class row at pp > 1 that names no schedule (empty, or marked "not stated")
    takes the fastest of 1F1B and interleaved 1F1B at each vpp that splits a stage's layers evenly,
    printed with the row; a stated schedule, an MoE row and a framework without interleaving keep
    their own. Few micro-batches (gb 64 over dp 8 at micro-batch 1) make the bubble worth cutting."""
    from autotune.validation.columns import schedule_stated
    from autotune.validation.predict import unstated_schedules
    assert not schedule_stated("") and not schedule_stated("1F1B/interleaved (not stated)")
    assert not schedule_stated("not stated") and not schedule_stated("1F1B (interleaving not stated in table)")
    assert schedule_stated("1F1B") and schedule_stated("interleaved")
    assert schedule_stated("ZB-V (not stated)") and schedule_stated("interleaved (vpp not stated)")
    dense = {"moe_experts": "", "moe_topk": "", "pp": "4", "dp": "8", "global_batch_seqs": "64",
             "framework": "megatron-core", "pipeline_schedule": ""}
    p = _write(tmp_path, [dense, {**dense, "pipeline_schedule": "1F1B/interleaved (not stated)"},
                          {**dense, "pipeline_schedule": "1F1B"}, {**dense, "framework": "nanotron"},
                          {**dense, "moe_experts": "8", "moe_topk": "2"}])
    cases, skipped = V.read_runs(p)
    assert not skipped
    # 24 layers over pp 4: 6 a stage, vpp 2, 3 or 6
    assert unstated_schedules(cases[0]) == (("1f1b", 1), ("interleaved_1f1b", 2), ("interleaved_1f1b", 3),
                                            ("interleaved_1f1b", 6))
    assert unstated_schedules(cases[1]) == unstated_schedules(cases[0])
    for c in cases[2:]:
        assert unstated_schedules(c) == (("1f1b", 1),)
    code, out, _ = _cli("validate", "--runs", str(p), "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    for r in rows[:2]:
        assert any(a.startswith("pp_schedule=interleaved_1f1b, vpp=") and a.endswith("(the fastest that fits)")
                   for a in r["assumptions"]), r["assumptions"]
        assert r["predicted"] > rows[2]["predicted"]            # tokens/s: interleaving cuts the bubble
    assert not any(a.startswith("pp_schedule=") for a in rows[2]["assumptions"])
    for r, why in zip(rows[3:], ("the nanotron class keeps 1F1B", "an MoE row keeps 1F1B")):
        assert f"pp_schedule=1f1b (not stated; {why})" in r["assumptions"], r["assumptions"]
    # Megatron interleaves only with a multiple of pp micro-batches: 8 sequences over dp 8 is one
    # micro-batch, so 1F1B (printed); a stated vpp, pp 1 and a bare "not stated" (no skip) behave
    few = {**dense, "global_batch_seqs": "8"}
    p = _write(tmp_path, [few, {**dense, "vpp": "3"}, {**dense, "pp": "1", "dp": "32"},
                          {**dense, "pipeline_schedule": "not stated"}, {**dense, "n_layers": "26"}])
    cases, skipped = V.read_runs(p)
    assert not skipped and cases[1].config.pp_chunks == 3
    code, out, _ = _cli("validate", "--runs", str(p), "--json")
    rows = json.loads(out)["rows"]
    assert "pp_schedule=1f1b, vpp=1 (the fastest that fits)" in rows[0]["assumptions"]
    assert not any(a.startswith("pp_schedule=") for r in rows[1:3] for a in r["assumptions"])
    assert any(a.startswith("pp_schedule=interleaved_1f1b") for a in rows[3]["assumptions"])
    assert "pp_schedule=1f1b, vpp=1 (the fastest that fits)" in rows[4]["assumptions"]   # 26 layers over pp 4


def test_an_unstated_pipeline_schedule_kept_at_1f1b_is_printed(tmp_path):
    """pp > 1 with no schedule: a Megatron dense row's is resolved (printed as the fastest that
    fits); a pytorch-class row and an MoE row keep 1F1B, and say so."""
    rows = [{"pp": "2", "dp": "16", "framework": "torchtitan", "zero_or_fsdp": "fsdp"},
            {"pp": "2", "dp": "16", "moe_experts": "64", "moe_topk": "8", "expert_ffn_hidden": "1408", "ep": "8"},
            {"pp": "2", "dp": "16", "pipeline_schedule": "1f1b", "framework": "torchtitan", "zero_or_fsdp": "fsdp"}]
    code, out, err = _cli("validate", "--runs", str(_write(tmp_path, rows)), "--json")
    assert code == 0, err
    said = [[a for a in r["assumptions"] if a.startswith("pp_schedule=")] for r in json.loads(out)["rows"]]
    assert said == [["pp_schedule=1f1b (not stated; the pytorch class keeps 1F1B)"],
                    ["pp_schedule=1f1b (not stated; an MoE row keeps 1F1B)"], []]


def test_a_file_with_no_scoreable_row_lists_every_reason_then_exits_2(tmp_path):
    """Each row's one-line reason on stdout (as a scored file lists its skipped rows; under --json
    the skipped list), then the one-line error on stderr, so the second row's problem is not hidden
    behind the first's."""
    p = _write(tmp_path, [{"gpu_type": "H100 PCIe"}, {"tp": "two"}])
    code, out, err = _cli("validate", "--runs", str(p))
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 2 and "gpu_type='H100 PCIe'" in lines[0] and "tp='two'" in lines[1]
    assert len(err.strip().splitlines()) == 1 and err.startswith("autotune: error: --runs")
    assert "(and 1 more, listed above)" in err
    code, out, err = _cli("validate", "--runs", str(p), "--json")
    assert code == 2 and [s["column"] for s in json.loads(out)["skipped"]] == ["gpu_type", "tp"]
