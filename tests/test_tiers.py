"""Issue 18 item 1: time and bytes per network tier and parallel dimension (``costmodel.tiers``),
checked against the cost model's own totals on sampled configurations."""
from __future__ import annotations

import json

import numpy as np
import pytest

from autotune.configparse import make_config, parse_config_text
from autotune.costmodel import evaluate, evaluate_batch
from autotune.costmodel.tiers import DIMS, TIERS, key
from autotune.space import SearchSpace, config_at
from autotune.specs import build_scenario
from tests.test_hardening import run as run_cli

CASES = [("llama3-70b", "metro-2bldg"), ("llama4-maverick", "campus-5bldg"), ("deepseek-v3", "region-pair"),
         ("mixtral-8x7b", "single-building")]
BREAKDOWN = {"tp": "tp_comm_s", "cp": "cp_comm_s", "ep": "ep_comm_s", "pp": "pp_comm_s", "dp": "dp_comm_s"}


def tier_sum(out, dim, measure, tiers=TIERS):
    return sum(out[key(dim, t, measure)] for t in tiers)


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def sampled(request):
    s = build_scenario(*request.param)
    b = SearchSpace(s).sample(3000, seed=11)
    return s, b, evaluate_batch(s, b, check=False, tiers=True)


def test_each_dimension_exposes_exactly_its_breakdown_term(sampled):
    _, _, out = sampled
    for d, term in BREAKDOWN.items():
        assert np.allclose(tier_sum(out, d, "exposed_s"), out[term], rtol=1e-9, atol=1e-12), d


def test_crossing_bytes_match_the_cross_building_totals_and_nvlink_is_tp(sampled):
    s, b, out = sampled
    crossing = "cross_region" if len({b.region for b in s.cluster.buildings}) > 1 else "cross_building"
    other = ({"cross_building", "cross_region"} - {crossing}).pop()
    for d in ("dp", "pp", "ep", "cp"):
        assert np.allclose(out[key(d, crossing, "bytes_per_gpu")], out[f"xb_{d}_bytes_per_gpu"], rtol=1e-12, atol=0), d
    for d in DIMS:
        for m in ("bytes_per_gpu", "link_s", "exposed_s"):
            assert not np.any(out[key(d, other, m)]), (d, m)   # one crossing tier per cluster
    # NVLink bytes: the TP collectives', plus, for experts under TP, the dispatcher's gathers (EP)
    tp_nvl = out[key("tp", "nvlink", "bytes_per_gpu")]
    et = np.where(np.asarray(b["etp"]) > 0, b["etp"], b["tp"]) if s.model.is_moe else np.ones(len(tp_nvl))
    assert np.allclose(tp_nvl[et <= 1], out["nvlink_bytes_per_gpu"][et <= 1], rtol=1e-12)
    assert np.all(tp_nvl <= out["nvlink_bytes_per_gpu"] * (1 + 1e-12))
    assert np.all(tp_nvl[et > 1] < out["nvlink_bytes_per_gpu"][et > 1])
    assert not np.any(tier_sum(out, "tp", "bytes_per_gpu", ("scale_out", crossing)))
    if s.cluster.n_buildings == 1:
        for d in DIMS:
            assert not np.any(out[key(d, crossing, "link_s")]) and not np.any(out[key(d, crossing, "bytes_per_gpu")])


def test_exposed_never_exceeds_link_time_except_for_the_pipeline(sampled):
    """TP, CP, EP and DP expose at most their link time (what overlaps is hidden); every figure is
    non-negative. DP's link time includes the step-end collectives the older figure reports."""
    _, _, out = sampled
    for d in ("tp", "cp", "ep", "dp"):
        for t in TIERS:
            link, exp = out[key(d, t, "link_s")], out[key(d, t, "exposed_s")]
            assert np.all(exp <= link * (1 + 1e-9) + 1e-12), (d, t)
    for kk in (key(d, t, m) for d in DIMS for t in TIERS for m in ("bytes_per_gpu", "link_s", "exposed_s")):
        assert np.all(out[kk] >= 0), kk
    assert np.all(tier_sum(out, "dp", "link_s") >= out["dp_link_s"] * (1 - 1e-9))


def test_one_row_matches_the_batch(sampled):
    s, b, out = sampled
    for i in (0, 7, 123):
        e = evaluate(s, config_at(b, i), check=False)
        for d in DIMS:
            for t in TIERS:
                for m in ("bytes_per_gpu", "link_s", "exposed_s"):
                    assert e.tiers[d][t][m] == pytest.approx(float(out[key(d, t, m)][i]), rel=1e-9, abs=1e-12)
        tot = e.tiers["total"]
        assert sum(tot[t]["exposed_s"] for t in TIERS) == pytest.approx(
            sum(e.breakdown[v] for v in BREAKDOWN.values()), rel=1e-9, abs=1e-12)


def test_hsdp_splits_its_inner_and_crossing_phases():
    """HSDP is two collectives: the shard group's inside the building, the replicas' all-reduce
    across; each is charged to its own tier, and the per-pass gathers are exposed where they run."""
    s = build_scenario("llama3-405b", "campus-5bldg")
    c = make_config(parse_config_text("tp=8,pp=16,dp=80,placement=dp_out,dp_flavour=hsdp,micro_batch=1,collective=ring"),
                    s.n_gpus)
    e = evaluate(s, c)
    dp = e.tiers["dp"]
    assert dp["scale_out"]["link_s"] > 0 and dp["cross_building"]["link_s"] > 0
    assert dp["cross_building"]["bytes_per_gpu"] == pytest.approx(e.traffic["xb_dp_bytes_per_gpu"])
    # the per-micro-batch gathers (exposed) run inside; the step-end all-reduce across mostly hides
    assert dp["scale_out"]["exposed_s"] > 10 * dp["cross_building"]["exposed_s"]


def test_evaluate_reports_tiers_in_json_and_in_its_table():
    args = ["evaluate", "--model", "llama3-70b", "--cluster", "metro-2bldg", "--gpus", "256", "--global-batch", "128",
            "--config", "tp=8,pp=8,placement=pp_out,dp_flavour=zero1,micro_batch=1"]
    code, out, err = run_cli([*args, "--json"])
    assert code == 0, err
    t = json.loads(out)["tiers"]
    assert set(t) == set(DIMS) | {"total"} and set(t["pp"]) == set(TIERS)
    assert t["pp"]["cross_building"]["bytes_per_gpu"] > 0 and t["tp"]["nvlink"]["link_s"] > 0
    code, out, err = run_cli(args)
    assert code == 0, err
    assert "per network tier" in out and "cross_building pp" in out and "nvlink         tp" in out


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_expert_parallel_members_are_tp_apart_whatever_cp_is(cp):
    """Megatron-Core folds cp into the expert mesh (tp-ep-dp-pp, parallel_state.py's expert
    RankGenerator has cp=1): with tp x ep = one node, the all-to-all never leaves the node, at
    any cp; at tp x ep = two nodes part of it does."""
    s = build_scenario("mixtral-8x7b", "metro-2bldg", gpus=256)
    for ep, inside in ((4, True), (8, False)):
        c = make_config(parse_config_text(f"tp=2,cp={cp},ep={ep},pp=2,placement=dp_out,micro_batch=1"), s.n_gpus)
        t = evaluate(s, c).tiers["ep"]
        assert t["nvlink"]["bytes_per_gpu"] > 0
        assert (t["scale_out"]["bytes_per_gpu"] == 0) == inside, (cp, ep)
