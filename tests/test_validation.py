import csv
import io
import json

import numpy as np
import pytest

import autotune.validation as V
from autotune.costmodel.params import CostParams
from autotune.errors import UserInputError
from autotune.validation import map_flavour, map_gpu, map_schedule, shipped_runs_path, validate
from validation_common import _cli, _csv_text, _shipped


ORIGINAL_ROWS = 129
"""The first rows of published_runs.csv: the set the shipped calibration was fit on (six
families); the rows after them were added later (issue 13) and are not in that fit."""


def test_published_runs_figures():
    """The tracked in-sample figures of the shipped calibration on the first rows (README):
    median <= 10%, p90 <= 26%, Korthikanti mean <= 12.5%. The bound was 12% until memory-bound
    kernels ran at the measured copy rate, 89% of the datasheet HBM bandwidth (2026-11-29, eighth
    session: their unfused attention streams the scores through HBM; 11.6% -> 12.2%, with the
    refit). It was 11.5% until the
    GEMM level was held at the H100 kernels' and the link efficiencies at nccl-tests' (2026-11-28,
    sixth session: Megatron's overhead moved into its framework factor, the A100 compute level went
    0.72 -> 0.70 of peak and the mean 10.5% -> 11.7%). It was 3.65% until
    the pipeline layout and the loss over the logits (2026-11-28, fourth session): Qi et al.'s
    48 A100 rows then no longer needed fast GEMMs to make up for a head on a full stage, the refit
    lowered the A100 GEMM level (0.79 -> 0.72) and Korthikanti et al.'s 8 rows, which run about
    10% faster per FLOP than both Qi et al. and Narayanan et al. on the same GPUs, went from 3.0%
    to 10.5% (README: no single A100 level serves the three; the issue's 3.5% is not met). The p90 bound was 25% until a node's
    NICs carried a data-parallel ring (ring_tier_of_span): with that round's physics and refit it
    moved from 22.2% to 25.7% (DeepSpeed's ZeRO-3 rows of Narayanan et al. and long-context NeMo
    rows) while every row's in-sample median went from 13.8% to 10.5% and the held-out median from
    21.1% to 14.9% (README)."""
    r = validate()
    core = [x["ape"] for x in r["rows"] if x["row"] <= ORIGINAL_ROWS]
    assert len(core) >= 120
    assert float(np.median(core)) <= 10.0
    assert float(np.percentile(core, 90)) <= 26.0
    korthikanti = [x["ape"] for x in r["rows"] if 23 <= x["row"] <= 30]
    assert len(korthikanti) == 8 and sum(korthikanti) / 8 <= 12.5
    for s in r["skipped"]:
        assert s["reason"]
    # the published runs the memory model rules out, named (each ran as published)
    oom = r["memory"]["out_of_memory_rows"]
    assert oom == [x["row"] for x in r["rows"] if not x["feasible"]] and 0 < len(oom) < len(r["rows"]) / 10


def test_mapping_rules_on_free_text():
    assert map_gpu("A100-SXM4-80GB (Selene)") == "a100-80gb"
    assert map_gpu("H100-SXM5-80GB (DGX H100)") == "h100-sxm"
    assert map_gpu("NVIDIA GB200 NVL72 rack") == "gb200-nvl72"
    assert map_gpu("TPU v5p") is None
    assert map_schedule("1F1B/interleaved (not stated)", 0) == "1f1b"
    assert map_schedule("ZB-2p", 0) == "zb2p"
    assert map_schedule("interleaved-1F1B", 0) == "interleaved_1f1b"
    assert map_schedule("1F1B", 3) == "interleaved_1f1b"
    assert map_flavour("zero3") == "fsdp" and map_flavour("hsdp") == "hsdp" and map_flavour("") == "ddp"
    # an empty flavour takes the framework class's default: Megatron-class runs shard the optimizer
    assert map_flavour("", "megatron") == "zero1" and map_flavour("", "pytorch") == "ddp"
    assert map_flavour("ddp", "megatron") == "ddp" and map_flavour("zero3", "megatron") == "fsdp"


def _write(tmp_path, rows, header=None):
    src = list(csv.DictReader(open(shipped_runs_path())))
    header = header or list(src[0].keys())
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore")
    w.writeheader()
    for r in rows(src):
        w.writerow(r)
    p = tmp_path / "runs.csv"
    p.write_text(buf.getvalue())
    return p


def test_bad_rows_are_skipped_with_reasons(tmp_path):
    def rows(src):
        a = dict(src[22]); a["gpu_type"] = "Gaudi 3"
        b = dict(src[22]); b["tp"] = "3"
        c = dict(src[22]); c["measured_value"] = "n/a"
        return [src[22], a, b, c]
    r = validate(_write(tmp_path, rows))
    assert r["n"] == 1 and len(r["skipped"]) == 3
    reasons = " ".join(s["reason"] for s in r["skipped"])
    assert "gpu_type" in reasons and "n_gpus" in reasons and "measured_value" in reasons


def test_stated_chunks_may_give_embedding_and_head_a_slot_each_but_no_more(tmp_path):
    """Qi et al.'s 1F1B-I runs make each layer its own chunk and their first and last stages hold
    one layer fewer: pp * vpp = n_layers + 2 scores, n_layers + 3 is skipped naming vpp."""
    def rows(src):
        qi = [r for r in src if "Zero Bubble" in r["source"] and r["pipeline_schedule"] == "interleaved-1F1B"]
        ok = dict(qi[0])
        assert int(ok["pp"]) * int(ok["vpp"]) == int(ok["n_layers"]) + 2
        bad = dict(ok); bad["n_layers"] = str(int(ok["n_layers"]) - 1)
        return [ok, bad]
    r = validate(_write(tmp_path, rows))
    assert r["n"] == 1 and len(r["skipped"]) == 1
    assert "vpp" in r["skipped"][0]["reason"] and "n_layers + 2" in r["skipped"][0]["reason"]


def test_a_csv_without_the_columns_is_an_error(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(UserInputError) as ei:
        validate(p)
    assert "--runs" in str(ei.value) and "missing" in str(ei.value)


# ------------------------------------------------------------------ source families and LOSO (issue 13)

SHIPPED_FAMILIES = {"Narayanan et al. SC'21", "Korthikanti et al. 2022", "NVIDIA/Megatron-LM",
                    "Qi et al. 'Zero Bubble Pipeline Parallelism' ICLR 2024", "NVIDIA/NeMo", "mosaicml/llm-foundry"}


def test_source_family_rule():
    f = V.source_family
    assert f("Narayanan et al. SC'21 arXiv:2104.04473 Table 1; values read from x") == "Narayanan et al. SC'21"
    assert f("Narayanan et al. SC'21 arXiv:2104.04473 Table 2 (PTD-P vs ZeRO-3)") == "Narayanan et al. SC'21"
    assert f("Korthikanti et al. 2022 arXiv:2205.05198 Table 5 (end-to-end)") == "Korthikanti et al. 2022"
    assert f("NVIDIA/NeMo docs/source/performance/performance_summary.md @8e3d") == "NVIDIA/NeMo"
    assert f("NVIDIA/Megatron-LM README.md 'Performance Benchmarking'") == "NVIDIA/Megatron-LM"
    assert f("Smith et al. 2024 (Fig. 3)") == "Smith et al. 2024"
    assert f("  Smith   et al.\n2024   Table 2") == "Smith et al. 2024"
    assert f("") == f("   ") == V.NO_SOURCE_FAMILY
    assert f("internal cluster log") == "internal cluster log"


def test_every_row_names_its_family():
    """Issue 13: at least 250 scoreable rows from at least 12 source families."""
    r = validate()
    fams = {x["family"] for x in r["rows"]}
    assert fams >= SHIPPED_FAMILIES and len(fams) >= 12 and r["n"] >= 250
    assert all(s["family"] for s in r["skipped"])
    assert sum(f["rows"] for f in r["families"]) == r["n"]


def test_spearman():
    assert V.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert V.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert V.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)  # ties share a rank
    # an exact 0.8 (five rows, sum of squared rank differences 4) is 0.8, not numpy's 0.7999999999999999
    assert V.spearman([1, 2, 3, 4, 5], [2, 1, 3, 5, 4]) >= 0.8
    assert V.spearman([5, 5, 5], [1, 2, 3]) is None and V.spearman([1, 2, 3], [7, 7, 7]) is None


def test_configuration_groups_on_the_shipped_runs():
    cases, _ = V.read_runs()
    groups = V.configuration_groups(cases)
    for g in groups:
        assert len(g) >= V.RANK_MIN_ROWS
        assert len({c.family for c in g}) == 1 and len({c.gpu for c in g}) == 1 and len({c.metric for c in g}) == 1
        assert len({tuple(sorted(V._layout(c).items())) for c in g}) >= 2
    sizes = sorted(len(g) for g in groups if g[0].family.startswith("Qi et al."))
    assert sizes == [12, 12, 12, 12]  # 4 models x (3 batches x 4 schedules)
    assert not any(g[0].family.startswith("Korthikanti") for g in groups)  # pairs that differ only in recompute
    r = validate()
    rc = r["rank_correlation"]
    assert rc["n_groups"] == len(groups) and r["min_spearman"] == rc["min_spearman"]
    assert rc["min_spearman"] == min(g["spearman"] for g in rc["groups"] if g["spearman"] is not None)
    for g in rc["groups"]:
        assert g["spearman"] == pytest.approx(V.spearman(g["predicted"], g["measured"]))


def _small_runs(tmp_path):
    """Three families, 10 rows: four Korthikanti rows, three Zero Bubble 1.5B rows (one batch, three
    schedules), three MosaicML MPT-30b H100 rows (128, 256, 512 GPUs)."""
    src = _shipped()
    rows = src[22:26] + [src[41], src[44], src[47]] + src[113:116]
    p = tmp_path / "small.csv"
    p.write_text(_csv_text([list(r.values()) for r in rows], list(src[0])))
    return p


def test_loso_scores_each_row_once_with_the_fit_that_did_not_see_its_family(tmp_path, monkeypatch):
    """The machinery, with a stand-in fit (fast): each fold's 'fit' records the families it saw and
    returns its own parameters; every held-out row must be scored with its own fold's parameters."""
    seen = []

    def fake_fit(path=None, start=None, cases=None):
        fams = {c.family for c in cases}
        seen.append(fams)
        return CostParams().with_values(network_efficiency=0.3 + 0.1 * len(seen)), {"n_rows": len(cases)}

    monkeypatch.setattr(V.fit, "fit_params", fake_fit)
    p = _small_runs(tmp_path)
    d = V.loso(p, jobs=1)
    cases, _ = V.read_runs(p)
    fams = {c.family for c in cases}
    assert d["n_families"] == 3 and len(seen) == 4 and seen[0] == fams  # the in-sample fit, then 3 folds
    assert sorted(r["row"] for r in d["rows"]) == sorted(c.row for c in cases)  # each row exactly once
    by_case = {c.row: c for c in cases}
    for fold, f in zip(seen[1:], d["families"]):
        assert f["family"] not in fold and fold == fams - {f["family"]}
        params = CostParams(**f["params"])
        for r in (x for x in d["rows"] if x["family"] == f["family"]):
            assert r["held_out_of_fit"] == f["family"]
            assert r["predicted"] == pytest.approx(V.score([by_case[r["row"]]], params)[0]["predicted"])
        assert f["median_ape"] == pytest.approx(float(np.median([x["ape"] for x in d["rows"]
                                                                  if x["family"] == f["family"]])))
    apes = [r["ape"] for r in d["rows"]]
    assert d["median_ape"] == pytest.approx(float(np.median(apes)))
    assert d["p90_ape"] == pytest.approx(float(np.percentile(apes, 90)))
    assert d["in_sample"]["median_ape"] == pytest.approx(float(np.median([r["in_sample_ape"] for r in d["rows"]])))


def test_loso_through_the_cli(run_cli, tmp_path):
    """The real fits on a small file: JSON has the family of every row, the per-family table, the
    overall held-out figures beside the in-sample ones, and the rank correlations."""
    p = _small_runs(tmp_path)
    r = run_cli("validate", "--runs", str(p), "--loso", "--jobs", "1", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["mode"] == "loso" and d["n"] == 10 and d["n_families"] == 3
    assert {f["family"] for f in d["families"]} == {r["family"] for r in d["rows"]}
    for f in d["families"]:
        assert f["rows"] + f["fit_rows"] == 10 and f["median_ape"] >= 0
    assert all(r["held_out_of_fit"] == r["family"] for r in d["rows"])
    assert d["median_ape"] > 0 and d["p90_ape"] >= d["median_ape"]
    assert set(d["in_sample"]) >= {"median_ape", "p90_ape", "params"} and d["shipped"]["median_ape"] > 0
    assert d["rank_correlation"]["n_groups"] == 2 and d["min_spearman"] is not None  # ZB 1.5B, MPT-30b


def test_loso_human_table(tmp_path, monkeypatch):
    monkeypatch.setattr(V.fit, "fit_params",
                        lambda path=None, start=None, cases=None: (CostParams(), {"n_rows": len(cases)}))
    code, out, err = _cli("validate", "--runs", str(_small_runs(tmp_path)), "--loso", "--jobs", "1")
    assert code == 0, err
    for needle in ("held-out family", "Korthikanti et al. 2022", "all rows, held out (each row once)",
                   "in-sample (the same fit on all rows)", "rank correlation (held out)", "min rho"):
        assert needle in out, out


def test_loso_needs_two_families(tmp_path):
    src = _shipped()
    p = tmp_path / "one.csv"
    p.write_text(_csv_text([list(r.values()) for r in src[22:30]], list(src[0])))
    code, out, err = _cli("validate", "--runs", str(p), "--loso")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--loso" in err and "2 source families" in err


@pytest.mark.parametrize("argv, needle", [
    (["--loso", "--fit"], "--fit"), (["--loso", "--write", "x.yaml"], "--write"),
    (["--loso", "--jobs", "-1"], "--jobs"),
])
def test_loso_option_errors(argv, needle):
    code, out, err = _cli("validate", *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


@pytest.mark.slow
def test_loso_on_the_shipped_runs(run_cli):
    r = run_cli("validate", "--loso", "--json", timeout=900)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["n"] >= 250 and {f["family"] for f in d["families"]} >= SHIPPED_FAMILIES and d["n_families"] >= 12
    assert sorted(x["row"] for x in d["rows"]) == sorted({x["row"] for x in d["rows"]})
    assert d["median_ape"] >= 0 and d["in_sample"]["median_ape"] >= 0


def test_a_data_parallel_ring_over_nodes_scales_as_internevo_measured():
    """InternEvo's ZeRO-1 runs of one 7B model on 8 to 512 A100s (4 x 100G RoCE per node): the
    measured tokens/s per GPU barely falls, and so must the prediction. Charged at one NIC per
    GPU (before ring_tier_of_span) the ratio predicted / measured fell from 1.2 to 0.3."""
    r = validate()
    ratios = {}
    cases = {c.row: c for c in V.read_runs()[0]}
    for x in r["rows"]:
        c = cases[x["row"]]
        if x["family"] == "InternLM/InternEvo" and c.config.tp == 1 and c.config.micro_batch == 8:
            ratios[c.scenario.n_gpus] = x["predicted"] / x["measured"]
    assert set(ratios) >= {8, 64, 512}
    assert max(ratios.values()) / min(ratios.values()) <= 1.15, ratios


def test_deepspeed_zero3_rows_run_without_overlap():
    from autotune.validation.deepspeed_engine import is_deepspeed_zero3
    assert is_deepspeed_zero3("zero3 (offload not stated)", "megatron-deepspeed", "DeepSpeed on Azure blog")
    assert is_deepspeed_zero3("ZeRO stage 3", "", "Narayanan et al. SC'21 Table 2")
    assert not is_deepspeed_zero3("FULL_SHARD", "pytorch-fsdp", "IBM FSDP blog")
    assert not is_deepspeed_zero3("fsdp (zero3)", "megatron-core", "Liu et al.")
    cases = V.read_runs()[0]
    zero3 = [c for c in cases if c.config.overlap_dp == 0 and c.config.dp_flavour == "fsdp"]
    assert {c.family.split(" 20")[0] for c in zero3} == {"Narayanan et al. SC'21", "DeepSpeed team 'DeepSpeed on Azure' blog"}
    assert all(any("overlap_dp=0 (DeepSpeed ZeRO-3" in a for a in c.assumptions) for c in zero3)


def test_deepspeed_engine_rows_reduce_after_the_backward_unless_overlap_comm():
    from autotune.validation.deepspeed_engine import deepspeed_reduces_after_backward as after
    assert after("zero1", "zero1", "megatron-deepspeed", "")
    assert after("zero2", "ZeRO stage 2", "deepspeed", "")
    assert after("zero1", "zero_stage=1", "", "DeepSpeed team blog")          # framework cell empty: the source
    assert after("ddp", "none", "megatron-deepspeed", "")                     # no ZeRO: the engine's boundary all-reduce
    assert after("zero2", "zero2 (overlap_comm false)", "deepspeed", "")
    assert after("zero2", "zero2, no overlap-comm", "deepspeed", "")
    assert not after("zero2", "zero2, overlap_comm true", "deepspeed", "")
    assert not after("zero2", "zero2 overlap_comm", "deepspeed", "")
    assert not after("zero1", "zero1", "megatron", "a source that mentions DeepSpeed")   # Megatron's optimizer
    assert not after("zero1", "zero1=8", "internevo", "InternEvo vs DeepSpeed")
    assert not after("fsdp", "zero3", "deepspeed", "")
    cases = V.read_runs()[0]
    off = [c for c in cases if any("overlap_dp=0 (DeepSpeed's engine" in a for a in c.assumptions)]
    assert off and all(c.config.overlap_dp == 0 and c.config.dp_flavour in ("ddp", "zero1") for c in off)
    assert {c.row for c in off} >= {307}
    on = [c for c in cases if c.scenario.workload.framework == "megatron" and "deepspeed" not in c.source.lower()
          and c.config.dp_flavour == "zero1"]
    assert on and all(c.config.overlap_dp == 1 for c in on)


def test_fine_grained_moe_subset_is_reported_from_its_rule(tmp_path):
    """The issue-13 subset figure comes from the command: rows with >= 64 experts of FFN <= 2,048."""
    def rows(src):
        fine = next(r for r in src if r["moe_experts"] and int(r["moe_experts"]) >= 64
                    and r["expert_ffn_hidden"] and int(r["expert_ffn_hidden"]) <= 2048)
        dense = src[22]
        return [fine, dense]
    r = validate(_write(tmp_path, rows))
    (sub,) = [s for s in r["subsets"] if s["subset"].startswith("fine-grained MoE")]
    assert r["n"] == 2 and sub["rows"] == 1
    fine_row = next(x for x in r["rows"] if x["row"] == 1)
    assert sub["median_ape"] == pytest.approx(fine_row["ape"])


def test_routing_twins_and_the_imbalance_they_measure():
    """The zoo lists five runs both ways (forced balance, dropless); the imbalance estimated from
    their ratios alone recovers a planted value, whatever level error the pairs share."""
    from dataclasses import replace
    from autotune.costmodel.params import default_params
    from autotune.validation.fit import fit_imbalance, routing_twins
    from autotune.validation.predict import score
    cases, _ = V.read_runs()
    twins = routing_twins(cases)
    assert len(twins) == 5 and all(b.family == d.family and b.scenario.workload.moe_routing == "balanced"
                                   and d.scenario.workload.moe_routing == "dropless" for b, d in twins)
    p = default_params()
    planted = p.with_values(dropless_expert_imbalance=1.45)
    rows = [c for pair in twins for c in pair]
    truth = {r["row"]: r["predicted"] for r in score(rows, planted)}
    synthetic = [(replace(b, measured=truth[b.row] * 1.2), replace(d, measured=truth[d.row] * 1.2)) for b, d in twins]
    assert abs(fit_imbalance(synthetic, p) - 1.45) < 0.01       # a level error in the data cancels
    # a level error in the parameters (Hopper's compute 12% slow, Megatron's 15%): the ratios move
    # little, the estimate stays within 0.1
    wrong = p.with_values(gpu_generation_efficiency_hopper=p.gpu_generation_efficiency_hopper * 0.88,
                          framework_efficiency_megatron=p.framework_efficiency_megatron * 0.85)
    assert abs(fit_imbalance(synthetic, wrong) - 1.45) < 0.1
    # flat: a twin whose prediction the imbalance does not move keeps the value given
    flat = [(synthetic[0][0], synthetic[0][0])]
    assert fit_imbalance(flat, p.with_values(dropless_expert_imbalance=1.2)) == 1.2
