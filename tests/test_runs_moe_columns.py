"""The runs CSV's MoE columns (issue 13, item 1): shared experts as a count or a width, the
router's load (moe_routing) and the un-permutation kernel (moe_unpermute), each read from its
spellings, unstated ones assumed and printed, unreadable ones skipping the row."""
from __future__ import annotations

import pytest

import autotune.validation as V

from test_runs_schema import _write


@pytest.mark.parametrize("text, want", [("1", 1), ("8", 8), ("20480 wide", 8), ("width 20480", 8),
                                        ("1 x 20480 wide", 8), ("0", 0)])
def test_shared_experts_read_as_a_count_or_a_width(tmp_path, text, want):
    """Qwen2-57B-A14B's one shared expert is 20,480 wide, 8 widths of its 2,560-wide routed
    experts: the column takes either spelling, and the model prices 8 widths."""
    p = _write(tmp_path, [{"moe_experts": "64", "moe_topk": "8", "expert_ffn_hidden": "2560", "ep": "8",
                           "moe_shared_experts": text}])
    (case,), skipped = V.read_runs(p)
    assert not skipped and case.scenario.model.moe_shared_experts == want


def test_a_shared_width_that_is_not_whole_expert_widths_skips_the_row(tmp_path):
    p = _write(tmp_path, [{}, {"moe_experts": "64", "moe_topk": "8", "expert_ffn_hidden": "2560", "ep": "8",
                               "moe_shared_experts": "20000 wide"}])
    cases, skipped = V.read_runs(p)
    assert len(cases) == 1 and skipped[0]["column"] == "moe_shared_experts" and "2560" in skipped[0]["reason"]


def test_published_qwen2_moe_rows_count_the_shared_expert_at_its_width():
    """Data check: Qwen2-57B-A14B (HF config: shared_expert_intermediate_size 20480,
    moe_intermediate_size 2560) comes to its stated 57B parameters only with the shared expert's
    full width; counted as one routed width it was 52B."""
    cases, _ = V.read_runs()
    qwen2 = [c for c in cases if c.model_name.startswith("Qwen2-57B")]
    assert qwen2 and all(c.scenario.model.moe_shared_experts == 8 for c in qwen2)
    assert all(abs(c.scenario.model.total_params / 57.4e9 - 1) < 0.02 for c in qwen2)


@pytest.mark.parametrize("text, want", [
    ("dropless", ("dropless", 1.0)), ("no token drop", ("dropless", 1.0)),
    ("force balance (--moe-router-force-load-balancing)", ("balanced", 1.0)),
    ("Dropless with --moe-router-force-load-balancing", ("balanced", 1.0)),
    ("capacity factor 1.25", ("capacity", 1.25)), ("cf=2", ("capacity", 2.0)), ("token drop", ("capacity", 1.0)),
    ("dropless (aux-loss balanced)", ("dropless", 1.0)), ("without token dropping", ("dropless", 1.0)),
    ("drop tokens: no", ("dropless", 1.0)), ("capacity factor -1", ("dropless", 1.0)),
    ("no force balance, dropless", ("dropless", 1.0)), ("balanced (fake balanced gate)", ("balanced", 1.0)),
])
def test_moe_routing_spellings(tmp_path, text, want):
    p = _write(tmp_path, [{"moe_experts": "64", "moe_topk": "8", "expert_ffn_hidden": "1408", "ep": "8",
                           "moe_routing": text}])
    (case,), skipped = V.read_runs(p)
    w = case.scenario.workload
    assert not skipped and (w.moe_routing, w.moe_capacity_factor) == want
    assert not any(a.startswith("moe_routing") for a in case.assumptions)


def test_moe_routing_unstated_is_dropless_and_printed_unreadable_skips(tmp_path):
    moe = {"moe_experts": "64", "moe_topk": "8", "expert_ffn_hidden": "1408", "ep": "8"}
    p = _write(tmp_path, [moe, {**moe, "moe_routing": "sometimes"}])
    (case,), skipped = V.read_runs(p)
    assert case.scenario.workload.moe_routing == "dropless" and "moe_routing=dropless (not stated)" in case.assumptions
    assert skipped[0]["column"] == "moe_routing" and skipped[0]["value"] == "sometimes"


@pytest.mark.parametrize("text", ["no force balance", "load balanced", "aux-loss balanced"])
def test_moe_routing_phrases_that_name_no_routing_skip_the_row(tmp_path, text):
    moe = {"moe_experts": "64", "moe_topk": "8", "expert_ffn_hidden": "1408", "ep": "8"}
    _, skipped = V.read_runs(_write(tmp_path, [moe, {**moe, "moe_routing": text}]))
    assert skipped and skipped[0]["column"] == "moe_routing"


@pytest.mark.parametrize("text,want", [
    ("scatter_add", "scatter_add"), ("out.scatter_add (torchtitan)", "scatter_add"), ("index_add_", "scatter_add"),
    ("Atomic scatter-add", "scatter_add"), ("fused", "fused"), ("--moe-permute-fusion", "fused"),
    ("Megatron-Core moe_unpermute", "fused"), ("DeepEP combine", "fused"), ("TE fused permute", "fused"),
    ("no scatter_add (gather)", "fused"), ("non-atomic", "fused"), ("MegaBlocks", "fused"),
    ("nonatomic", "fused"), ("not using scatter_add", "fused"), ("atomic-free", "fused"), ("deep-ep", "fused"),
])
def test_moe_unpermute_spellings_set_the_workload_and_silence_the_assumption(tmp_path, text, want):
    moe = {"moe_experts": "64", "moe_topk": "8", "expert_ffn_hidden": "1408", "ep": "8", "framework": "torchtitan"}
    (case,), skipped = V.read_runs(_write(tmp_path, [{**moe, "moe_unpermute": text}]))
    assert not skipped and case.scenario.workload.moe_unpermute == want
    assert not any(a.startswith("moe_unpermute") for a in case.assumptions)


def test_moe_unpermute_unstated_takes_the_class_default_and_bad_cells_skip(tmp_path):
    """Unstated: the pytorch class's scatter_add, printed; a cell naming neither kernel, or one on a
    dense model, skips the row naming the column and the value."""
    moe = {"moe_experts": "64", "moe_topk": "8", "expert_ffn_hidden": "1408", "ep": "8", "framework": "torchtitan"}
    rows = [moe, {**moe, "moe_unpermute": "sometimes"}, {"moe_unpermute": "scatter_add"}]
    (case,), skipped = V.read_runs(_write(tmp_path, rows))
    w = case.scenario.workload
    assert w.moe_unpermute is None and w.resolved_moe_unpermute == "scatter_add"
    assert any(a.startswith("moe_unpermute=scatter_add") for a in case.assumptions)
    assert [(s["column"], s["value"]) for s in skipped] == [("moe_unpermute", "sometimes"),
                                                            ("moe_unpermute", "scatter_add")]
    assert "dense model" in skipped[1]["reason"]


@pytest.mark.parametrize("text", ["--moe-permute-fusion false", "unfused", "no permute fusion", "fused: no",
                                  "fused moe_unpermute instead of scatter_add", "allgather dispatcher", "combine"])
def test_moe_unpermute_cells_that_do_not_say_which_kernel_skip_the_row(tmp_path, text):
    """A fusion switched off (Megatron-Core 0.9 and 0.11+ un-permute differently), both kernels
    named, or only an all-gather or a bare combine: the row is skipped naming the column and value."""
    moe = {"moe_experts": "64", "moe_topk": "8", "expert_ffn_hidden": "1408", "ep": "8"}
    _, skipped = V.read_runs(_write(tmp_path, [moe, {**moe, "moe_unpermute": text}]))
    assert [(s["column"], s["value"]) for s in skipped] == [("moe_unpermute", text)]


def test_moe_unpermute_on_an_einsum_dispatch_skips_the_row(tmp_path):
    moe = {"moe_experts": "64", "moe_topk": "2", "expert_ffn_hidden": "1408", "ep": "8", "ep_dispatcher": "einsum"}
    _, skipped = V.read_runs(_write(tmp_path, [moe, {**moe, "moe_unpermute": "scatter_add"}]))
    assert [(s["column"], s["value"]) for s in skipped] == [("moe_unpermute", "scatter_add")]
    assert "einsum" in skipped[0]["reason"]
