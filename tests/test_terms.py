"""The cost model's named terms, each on its own (costmodel/exchanges.py, ep_dispatch.ep_terms,
dp_step.py, pipe_time.py, traffic.py): what each must be where its dimension is absent, bounds
between its fields, and that iteration_formulas reports them unchanged (hypothesis over seeded
draws of each scenario's legal space)."""
from functools import lru_cache

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.costmodel.compute_pass import R_FULL, pass_compute
from autotune.costmodel.dp_step import dp_schedule, optimizer_step
from autotune.costmodel.ep_dispatch import ep_terms
from autotune.costmodel.exchanges import cp_terms, p2p_link, tp_terms
from autotune.costmodel.iteration import evaluate_batch
from autotune.costmodel.params import default_params
from autotune.costmodel.pipe_time import pace, pp_links
from autotune.costmodel.scenario_consts import scenario_consts
from autotune.costmodel.terms import F_DDP, F_FSDP, Transport, dp_comm_groups, expert_tp, layout, sum_groups
from autotune.costmodel.traffic import step_bytes
from autotune.costmodel.xp import NUMPY as xp
from autotune.space import SearchSpace
from autotune.specs import build_scenario

CASES = [("llama3-70b", "campus-5bldg"), ("mixtral-8x7b", "metro-2bldg"), ("deepseek-v3", "region-pair"),
         ("llama3-8b", "single-building"), ("llama4-maverick", "metro-2bldg"),
         ("llama3-70b", "metro-2bldg", ("workload.tp_comm_overlap=true",)),
         ("mixtral-8x7b", "campus-5bldg", ("workload.ep_comm_overlap=true", "workload.fsdp_regather=forward")),
         ("llama3-70b", "metro-2bldg", ("workload.tp_comm_overlap=true", "workload.pipeline_layout=ends")),
         ("llama3-8b", "metro-2bldg", ("workload.tp_comm_overlap=true", "workload.seq_len=256"))]
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@lru_cache(maxsize=None)
def scenario_of(model, cluster, overrides=()):
    return build_scenario(model, cluster, overrides=list(overrides))


def _terms(scen, b):
    """The terms as iteration_formulas builds them, for rows ``b``."""
    p = default_params()
    k = scenario_consts(scen, p)
    f = xp.asfloat
    tp, cp, ep, pp, dp = (f(b[x]) for x in ("tp", "cp", "ep", "pp", "dp"))
    v, mb = f(b["pp_chunks"]), f(b["micro_batch"])
    fl, sc, rc = b["dp_flavour"], b["pp_schedule"], b["recompute"]
    m, tok = k.global_batch / (dp * mb), mb * k.seq / cp
    lay, t = layout(k, b, xp), Transport(k, b, xp)
    link, et = p2p_link(k, t, xp), expert_tp(b, xp)
    pc = pass_compute(k, p, b, lay, xp, mb, cp, tp, ep, et, rc)
    tpt = tp_terms(k, p, rc, tok, tp, lay, pc.lin_f, pc.lin_x, pc.lin_xb, xp)
    cpt = cp_terms(k, p, tok, tp, cp, lay.x_cp, lay.Ls, pc.ct.core, link, xp)
    ept = ep_terms(k, p, sc, pp, v, m, rc, tok, tp, ep, et, lay, pc.ct, link.goodput, xp)
    dps = sum_groups(dp_comm_groups(k, p, b, xp, t, lay))
    sched = dp_schedule(k, fl, rc, tp, m, lay, dps, xp)
    pl = pp_links(k, p, t, link, tok, tp, pp, v, sc, lay.b_pp, xp)
    by = step_bytes(k, fl, m, tp, cp, pp, lay, sched, dps, pl, tpt, cpt, ept, et, xp)
    return dict(k=k, m=m, tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, fl=fl, lay=lay, pc=pc, tpt=tpt, cpt=cpt, ept=ept,
                dps=dps, sched=sched, pl=pl, by=by)


@SETTINGS
@given(case=st.sampled_from(CASES), seed=st.integers(0, 2**31))
def test_each_term_is_zero_without_its_dimension_and_exposes_no_more_than_its_link(case, seed):
    scen = scenario_of(*case)
    b = SearchSpace(scen).sample(256, seed=seed)
    T = _terms(scen, b)
    tp, cp, pp = T["tp"], T["cp"], T["pp"]
    tpt, cpt, ept, pl, by = T["tpt"], T["cpt"], T["ept"], T["pl"], T["by"]
    # TP: nothing at tp 1; the exposed part never above the link time; the backward at least the forward
    assert (tpt.f_link[tp == 1] == 0).all() and (tpt.b_link[tp == 1] == 0).all()
    assert (tpt.f <= tpt.f_link * (1 + 1e-12)).all() and (tpt.b <= tpt.b_link * (1 + 1e-12)).all()
    if scen.workload.tp_comm_overlap:        # the GEMMs hide some of it wherever tp > 1
        assert (tpt.f[tp > 1] < tpt.f_link[tp > 1]).any()
    assert (tpt.b_link >= tpt.f_link).all() and (tpt.rerun >= 0).all()
    # TP overlap: the exposed time is what the GEMMs beside it leave, above the pieces that cannot overlap
    if scen.workload.tp_comm_overlap:
        from autotune.costmodel.collectives import tp_exposed
        from autotune.costmodel.constants import TE_PIPELINE_SPLIT_PIECES
        pc = T["pc"]
        np.testing.assert_allclose(tpt.f, tp_exposed(tpt.f_link, pc.lin_x, 0.5 / tp + 0.5 / TE_PIPELINE_SPLIT_PIECES, xp),
                                   rtol=1e-12, atol=0)
        np.testing.assert_allclose(tpt.b, tp_exposed(tpt.b_link, pc.lin_xb + pc.lin_f, 0.5 / tp, xp), rtol=1e-12, atol=0)
    # GEMMs in TP overlap's pieces never run faster than whole, and run whole without it or at tp 1
    pc = T["pc"]
    for split in (pc.lin_x, pc.lin_xb):
        assert (np.asarray(split) >= np.asarray(pc.lin_f) * (1 - 1e-12)).all()
        if not scen.workload.tp_comm_overlap:
            assert np.array_equal(np.asarray(split), np.asarray(pc.lin_f))
        else:
            np.testing.assert_allclose(np.broadcast_to(split, tp.shape)[tp == 1],
                                       np.broadcast_to(pc.lin_f, tp.shape)[tp == 1], rtol=1e-12)
    # CP: nothing at cp 1, never negative
    assert (cpt.f[cp == 1] == 0).all() and (cpt.b[cp == 1] == 0).all()
    assert (cpt.f >= 0).all() and (cpt.b >= 0).all()
    # EP: 4 or 6 all-to-alls a MoE layer; nothing on a dense model
    assert set(np.unique(ept.passes)) <= {4.0, 6.0}
    if not T["k"].experts:
        assert (ept.f == 0).all() and (ept.b == 0).all()
    assert (ept.f >= 0).all() and (ept.b >= 0).all()   # (a paired backward hides more than its forward)
    # PP: no chain and no link floor at pp 1
    assert (np.asarray(pl.chain)[pp == 1] == 0).all() and (np.asarray(pl.bw_bound)[pp == 1] == 0).all()
    assert (np.asarray(pl.xhops) <= np.asarray(pl.hops)).all()
    # DP: DDP gathers nothing per micro-batch; the shard-group counts are never negative
    ddp = T["fl"] == F_DDP
    assert (np.broadcast_to(T["sched"].gather_f_mb, ddp.shape)[ddp] == 0).all()
    assert (np.asarray(T["sched"].gathers) >= 0).all() and (np.asarray(T["sched"].reduces) >= 0).all()
    # bytes: nothing crosses buildings in a single-building cluster; never negative anywhere
    for name, x in by._asdict().items():
        assert (np.asarray(x) >= 0).all(), name
    if scen.cluster.n_buildings == 1:
        assert (np.asarray(by.xb) == 0).all()


@SETTINGS
@given(case=st.sampled_from(CASES), seed=st.integers(0, 2**31))
def test_iteration_reports_its_terms(case, seed):
    """The breakdown is the terms times the micro-batches (homogeneous clusters: no share by speed)."""
    scen = scenario_of(*case)
    b = SearchSpace(scen).sample(128, seed=seed)
    T = _terms(scen, b)
    out = evaluate_batch(scen, b, check=False)
    m = T["m"]
    np.testing.assert_allclose(out["tp_comm_s"], m * (T["tpt"].f + T["tpt"].b), rtol=1e-12, atol=0)
    np.testing.assert_allclose(out["cp_comm_s"], m * (T["cpt"].f + T["cpt"].b), rtol=1e-12, atol=0)
    np.testing.assert_allclose(out["ep_comm_s"], m * (T["ept"].f + T["ept"].b), rtol=1e-12, atol=0)
    np.testing.assert_allclose(out["xb_bytes_per_gpu"], T["by"].xb, rtol=1e-12, atol=0)
    np.testing.assert_allclose(out["nvlink_bytes_per_gpu"], T["by"].nvlink_tp + T["by"].nvlink_etp, rtol=1e-12, atol=0)
    np.testing.assert_allclose(out["dp_link_s"], T["sched"].grad + T["sched"].param, rtol=1e-12, atol=0)
    n_d = T["dp"] * T["cp"]
    n_e = np.maximum(n_d * T["tp"] / (expert_tp(b, xp) * T["ep"]), 1.0)      # expert data parallel
    owned, t_opt = optimizer_step(T["k"], T["fl"], T["lay"], n_d, n_e, n_d / T["lay"].b_dp, n_e / T["lay"].x_exp, xp)
    np.testing.assert_allclose(out["optimizer_s"], t_opt, rtol=1e-12, atol=0)


def test_pace_overlaps_gathers_only_when_told():
    """FSDP gathers hide behind the pass they feed with overlap, add to it without."""
    tf, tb, tw = np.array([1.0, 1.0]), np.array([2.0, 2.0]), np.array([0.5, 0.5])
    gf, gb = np.array([0.4, 1.5]), np.array([0.4, 3.0])
    f_on, b_on, tot_on = pace(tf, tb, tw, gf, gb, np.array([True, True]), xp)
    f_off, b_off, tot_off = pace(tf, tb, tw, gf, gb, np.array([False, False]), xp)
    assert f_on.tolist() == [1.0, 1.5] and b_on.tolist() == [2.0, 3.0] and tot_on.tolist() == [3.5, 5.0]
    assert f_off.tolist() == [1.4, 2.5] and b_off.tolist() == [2.4, 5.0] and tot_off.tolist() == [4.3, 8.0]


def test_fsdp_every_pass_gathers_twice_a_micro_batch_and_reduces_once():
    """ZeRO-3 (every_pass): two shard-group all-gathers and one reduce-scatter per micro-batch, none
    once per step beyond them; DDP none."""
    scen = scenario_of("llama3-70b", "campus-5bldg")
    b = SearchSpace(scen).sample(512, seed=3)
    T = _terms(scen, b)
    fsdp = (T["fl"] == F_FSDP)
    assert fsdp.any()
    s = T["sched"]
    m = np.broadcast_to(T["m"], fsdp.shape)
    gathers = np.broadcast_to(np.asarray(s.gathers, float), fsdp.shape)
    reduces = np.broadcast_to(np.asarray(s.reduces, float), fsdp.shape)
    assert scen.workload.fsdp_regather == "every_pass" and scen.workload.fsdp_gather == "unit"
    np.testing.assert_allclose(gathers[fsdp], 2 * m[fsdp])
    np.testing.assert_allclose(reduces[fsdp], m[fsdp])


def test_cp_ring_exposes_its_transfers_beyond_the_attention_they_overlap():
    """cp - 1 transfers a layer pass: with no attention to hide behind each is exposed whole (K/V
    forward; K/V and dK/dV backward, plus the step's latency); behind a long attention none is."""
    scen = scenario_of("llama3-70b", "campus-5bldg")
    p = default_params()
    k = scenario_consts(scen, p)
    b = SearchSpace(scen).sample(512, seed=5)
    lay, t = layout(k, b, xp), Transport(k, b, xp)
    link = p2p_link(k, t, xp)
    tp, cp = xp.asfloat(b["tp"]), xp.asfloat(b["cp"])
    tok = xp.asfloat(b["micro_batch"]) * k.seq / cp
    free = cp_terms(k, p, tok, tp, cp, lay.x_cp, lay.Ls, 0.0, link, xp)
    np.testing.assert_allclose(free.f, lay.Ls * (cp - 1) * (free.kv_bytes / free.bw + free.alpha), rtol=1e-12)
    np.testing.assert_allclose(free.b, lay.Ls * (cp - 1) * (2 * free.kv_bytes / free.bw + free.alpha), rtol=1e-12)
    assert (cp > 1).any() and (free.f[cp == 1] == 0).all() and (free.f[cp > 1] > 0).all()
    hidden = cp_terms(k, p, tok, tp, cp, lay.x_cp, lay.Ls, 1e6, link, xp)
    assert (hidden.f == 0).all() and (hidden.b == 0).all()


def test_a_mixed_gpu_cluster_hides_tp_behind_its_own_shared_gemms(monkeypatch):
    """Buildings of different GPUs share the work by speed; under TP comm overlap the GEMMs that
    hide the TP collectives are the bottleneck rank's own share of them (hs.compute x the GEMMs),
    its collectives hs.comm x the link time (exchanges.tp_hidden), as iteration_formulas reports."""
    import autotune.costmodel.iteration as it
    from autotune.costmodel.exchanges import tp_hidden
    scen = scenario_of("llama3-8b", "metro-2bldg", ("cluster.buildings.1.gpu=b200", "workload.tp_comm_overlap=true",
                                                    "workload.seq_len=256"))
    b = SearchSpace(scen).sample(1024, seed=7)
    seen = {}
    real = it.hetero_shares

    def spy(*a, **kw):
        seen["hs"] = real(*a, **kw)
        return seen["hs"]
    monkeypatch.setattr(it, "hetero_shares", spy)
    out = it.iteration_formulas(scen, b, default_params(), xp)
    hs, T = seen["hs"], _terms(scen, b)
    f, bw = tp_hidden(T["k"], hs.comm * T["tpt"].f_link, hs.comm * T["tpt"].b_link, hs.compute * T["pc"].lin_f,
                      hs.compute * T["pc"].lin_x, hs.compute * T["pc"].lin_xb, T["tp"], xp)
    np.testing.assert_allclose(out["tp_comm_s"], T["m"] * (f + bw), rtol=1e-12, atol=0)
    # the budget matters here: with the whole GEMMs as the budget some rows would expose less
    f_whole, b_whole = tp_hidden(T["k"], hs.comm * T["tpt"].f_link, hs.comm * T["tpt"].b_link, T["pc"].lin_f,
                                 T["pc"].lin_x, T["pc"].lin_xb, T["tp"], xp)
    assert not np.allclose(f + bw, f_whole + b_whole, rtol=1e-9)


@SETTINGS
@given(layout_=st.sampled_from(["even", "ends", "balanced"]), seed=st.integers(0, 2**31))
def test_tp_overlap_adds_exactly_its_pieces_to_each_pass(layout_, seed):
    """compute_pass under TP comm overlap, in every pipeline layout: the forward runs its GEMMs as
    lin_x and the backward its input gradients as lin_xb (kernels.te_pieces), so against the same
    rows without overlap each pass grows by exactly its pieces' extra time, the backward by the
    forward's too under full recomputation (rows whose bottleneck rank is the same both ways;
    selective recomputation re-runs the attention core only, no GEMM)."""
    on, off = (scenario_of("llama3-70b", "metro-2bldg", (f"workload.tp_comm_overlap={o}",
                                                         f"workload.pipeline_layout={layout_}")) for o in ("true", "false"))
    b = SearchSpace(on).sample(256, seed=seed)
    a, z = _terms(on, b)["pc"], _terms(off, b)["pc"]
    same = np.broadcast_to(np.asarray(a.lin_f) == np.asarray(z.lin_f), np.shape(b["tp"]))
    assert same.mean() > 0.9
    full = np.asarray(b["recompute"]) == R_FULL
    for x_on, x_off, extra in ((a.t_f, z.t_f, a.lin_x - a.lin_f),
                               (a.t_b, z.t_b, a.lin_xb - a.lin_f + np.where(full, a.lin_x - a.lin_f, 0.0))):
        d = np.broadcast_to(np.asarray(x_on) - np.asarray(x_off), same.shape)[same]
        np.testing.assert_allclose(d, np.broadcast_to(extra, same.shape)[same], rtol=1e-9, atol=1e-12)
    assert (np.asarray(a.t_w) == np.asarray(z.t_w)).all()


def test_tp_hidden_budgets_and_floors():
    """exchanges.tp_hidden on numbers: the forward hides behind its GEMMs in pieces (lin_x), the
    backward behind its input gradients in pieces (lin_xb) and its weight gradients (lin_f); the
    forward never below half a ring piece plus half a pipeline piece, the backward never below half
    a ring piece; without overlap all of the link is exposed."""
    from types import SimpleNamespace

    from autotune.costmodel.constants import TE_PIPELINE_SPLIT_PIECES as P4
    from autotune.costmodel.exchanges import tp_hidden
    on, off = SimpleNamespace(tp_overlap=True), SimpleNamespace(tp_overlap=False)
    assert tp_hidden(on, 10.0, 10.0, 1.0, 2.0, 3.0, 8.0, xp) == (8.0, 6.0)       # budget-bound both ways
    f, b = tp_hidden(on, 10.0, 10.0, 100.0, 100.0, 100.0, 8.0, xp)               # GEMMs hide all but the floors
    assert f == 10.0 * (0.5 / 8 + 0.5 / P4) and b == 10.0 * 0.5 / 8
    assert tp_hidden(off, 10.0, 12.0, 1.0, 2.0, 3.0, 8.0, xp) == (10.0, 12.0)
