"""The scale-across findings (issue 4, item 5) as checks on the model's own output.

Each test reads iteration times the cost model computes (exhaustive optima per group through
``autotune.analysis.best_by``, or paired evaluations that change one knob); no expected time is
written here. Where the model disagrees with a finding in some regime, the test states the regime
it checks and the docstring says what the model shows outside it (see experiments/README.md).
"""
from __future__ import annotations

from functools import lru_cache

import pytest

from autotune.analysis import best_by
from autotune.baselines import naive_config, production_config
from autotune.costmodel import evaluate
from autotune.specs import build_scenario


@lru_cache(maxsize=None)
def scen(model: str, **xb):
    return _scen(model, xb)


def _scen(model, xb: dict, batch=None):
    ov = [f"cluster.cross_building.{k}={v}" for k, v in xb.items()]
    if batch:
        ov.append(f"workload.global_batch_seqs={batch}")
    return build_scenario(model=model, cluster="metro-2bldg", overrides=ov)


@lru_cache(maxsize=None)
def placement_times(model, **xb):
    b = best_by(scen(model, **xb), ("placement",), where={"placement": ("dp_out", "pp_out")})
    return b[("dp_out",)].iteration_time_s, b[("pp_out",)].iteration_time_s


# (a) -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("oversub", [1, 2.8, 4])
def test_a_small_dense_model_ties_across_placements_where_it_waits_on_its_host(oversub):
    """Dense llama3-8b on 8,192 GPUs (512 tokens per GPU per step): the best DP-out and the best
    PP-out configurations tie within 3% at every ratio up to 4:1 (when last measured PP-out ahead
    by 2.5%, 2.3% and 2.2% at 1:1, 2.8:1 and 4:1; the twelfth session's first per-pass host floor,
    which floored the weight gradients apart under every schedule, briefly put it at 3.3-3.7%).

    Regime: one 8k-token sequence per 16 GPUs leaves each layer pass less GPU work than its host
    takes to launch (the host floor, ``host_floor.host_launch_time``): DP-out's optimum (tp 8, cp 2,
    no pipeline, HSDP) spends 0.12 s of its 0.22 s step waiting on its host, PP-out's (tp 8, pp 2,
    GPipe, FSDP) as long in its pipeline's fill. Before the host floor, DP-out won by 1.7-4.5%
    (tp 8, cp 2, pp 4 interleaved: the cool-down hid its cross-building reduce-scatter); before the
    interleaved schedule's per-chunk gradient sync, PP-out won by 3.2-12.1%. A verdict this close
    moves with every term of the model, which is why this test pins it as a tie."""
    dp, pp = placement_times("llama3-8b", oversubscription=oversub)
    assert abs(dp / pp - 1.0) < 0.03


@pytest.mark.slow
@pytest.mark.parametrize("model", ["llama3-70b"])
def test_a_large_dense_models_lean_dp_out(model):
    """70B on 8,192 GPUs: DP-out ahead by a little at 1:1 and at 2.8:1 (2.1% and 2.0% when last
    measured; DP-out tp 4, cp 2, pp 4 interleaved against PP-out's ZBV). They tied (DP-out 0.13% and
    0.02% ahead) until ZBV's first rank was charged the embedding and the head it holds (it also
    runs the last stage); before the interleaved schedule's per-chunk gradient sync was modelled,
    PP-out led by 6.8% at 2.8:1. Within 5%: a lean, not a robust preference."""
    for oversub in (1, 2.8):
        dp, pp = placement_times(model, oversubscription=oversub)
        assert dp < pp < 1.05 * dp


# (b) -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_b_moe_on_8k_gpus_prefers_dp_out_where_it_waits_on_its_host():
    """MoE (Mixtral, 8 experts) on 8,192 GPUs over two buildings: DP-out leads at 1:1 and at 16:1
    (7.4% and 10.2% when last measured, 2026-11-29's eleventh session), by more as the link gets
    scarcer. Both optima wait on their host for about a third of the step (the host floor,
    ``host_floor.host_launch_time``): DP-out's (tp 8, ep 8, no pipeline, HSDP) sends one gradient
    all-reduce a step across the buildings; PP-out's pays a pipeline bubble on top (interleaved at
    1:1, GPipe at 16:1). The finding said MoE prefers PP-out once cross-building bandwidth is
    scarce, and the model agreed until the host floor (placements within 1.5% at 1:1, PP-out 6.2%
    ahead at 16:1): a verdict at this scale moves with the per-layer terms of the model."""
    dp1, pp1 = placement_times("mixtral-8x7b", oversubscription=1)
    dp16, pp16 = placement_times("mixtral-8x7b", oversubscription=16)
    assert dp1 < pp1 and dp16 < pp16
    assert pp16 / dp16 > pp1 / dp1


@pytest.mark.slow
def test_b_many_experts_placements_tie_at_metro_distance_and_dp_out_leads_as_distance_grows():
    """Llama 4 Maverick (128 experts) on 8,192 GPUs over two buildings: at 10 km the placements stay
    within 5% from 1:1 to 2.8:1 oversubscription (DP-out 1.9% and 1.6% ahead when last measured),
    and at 500 km and beyond DP-out leads, by more as the distance grows (10.6% at 500 km, 19.0% at
    2,000 km, 4:1): PP-out's pipeline pays the round trip on every micro-batch's hops, DP-out's
    gradient reduction once per step in Megatron's large buckets. The finding said many experts
    prefer PP-out; the model agreed until 2026-11-28's sixth session (PP-out 5.2% ahead at 1:1,
    14.3% at 500 km), when Megatron-Core's bucket size, max(40M, 1M x dp x cp) parameters, replaced
    a fixed 80 MB (DP-out's cross-building reduction had paid hundreds of latency-bound calls) and
    the collective efficiencies were held at nccl-tests' 0.9 instead of the fitted 0.6. History
    before: the first model had it PP-out everywhere; issue 13's first recalibration put DP-out
    ahead at metro distance (3.1% at 1:1); the DP ring on the node's NICs put PP-out ahead again."""
    dp1, pp1 = placement_times("llama4-maverick", oversubscription=1)
    dp3, pp3 = placement_times("llama4-maverick", oversubscription=2.8)
    assert abs(dp1 / pp1 - 1) <= 0.05 and abs(dp3 / pp3 - 1) <= 0.05
    dp500, pp500 = placement_times("llama4-maverick", oversubscription=4, distance_km=500)
    dp2000, pp2000 = placement_times("llama4-maverick", oversubscription=4, distance_km=2000)
    assert dp500 < pp500 and dp2000 < pp2000
    assert pp2000 / dp2000 > pp500 / dp500


# (c) -------------------------------------------------------------------------------------------
def test_c_hsdp_beats_fsdp_when_the_shard_group_would_span_buildings():
    """Under DP-out (the data-parallel group spans both buildings): the best HSDP configuration
    beats the best FSDP one, and by more as the cross-building link gets scarcer.

    Regime: where FSDP's per-micro-batch gathers are not fully hidden (8B, 70B here). For 405B
    on 8,192 GPUs compute hides both and they are within 0.1%."""
    gaps = []
    for oversub in (2.8, 8, 16):
        b = best_by(scen("llama3-70b", oversubscription=oversub), ("dp_flavour",),
                    where={"placement": ("dp_out",), "dp_flavour": ("fsdp", "hsdp")})
        fsdp, hsdp = b[("fsdp",)].iteration_time_s, b[("hsdp",)].iteration_time_s
        assert hsdp < fsdp
        gaps.append(fsdp / hsdp - 1)
    assert gaps == sorted(gaps)


def test_c_paired_hsdp_never_slower_on_cross_building_fsdp_groups():
    """Configuration by configuration: switching the naive rule's DP-out FSDP configuration to
    HSDP speeds it up (its per-micro-batch gathers across buildings are exposed)."""
    s = scen("llama3-8b", oversubscription=8)
    base = naive_config(s)
    assert base.dp_flavour == "fsdp" and base.placement == "dp_out"
    f = evaluate(s, base).iteration_time_s
    h = evaluate(s, base.model_copy(update={"dp_flavour": "hsdp"})).iteration_time_s
    assert h < f


# (d) -------------------------------------------------------------------------------------------
def schedule_edges(model, distance_km, batch):
    b = best_by(_scen(model, {"distance_km": distance_km}, batch), ("pp_schedule",), where={"placement": ("pp_out",)})
    t = {k[0]: v.iteration_time_s for k, v in b.items()}
    return t["1f1b"] / t["interleaved_1f1b"] - 1, t["zb1p"] / t["zbv"] - 1


@pytest.mark.slow      # 26 s: CI's slow suite runs it (default suite under 10 minutes)
def test_d_message_multiplying_schedules_lose_their_edge_with_latency():
    """PP-out, llama3-8b, 1,024 sequences: interleaved 1F1B's lead over 1F1B and ZBV's over ZB1P
    shrink from 1 km to 2,000 km; interleaved's is a loss there, ZBV's by 4,000 km.

    Regime: the edge is measured between each schedule's best configuration. For 70B at its
    default batch the model keeps interleaved ahead of 1F1B (1F1B's own steady state is
    latency-bound with only p micro-batches in flight); ZBV still loses its edge there."""
    il_near, zbv_near = schedule_edges("llama3-8b", 1, 1024)
    il_far, zbv_far = schedule_edges("llama3-8b", 2000, 1024)
    il_farther, zbv_farther = schedule_edges("llama3-8b", 4000, 1024)
    assert il_near > 0 and zbv_near > 0
    assert il_farther < il_far < il_near and zbv_farther < zbv_far < zbv_near
    assert il_far < 0 and zbv_farther < 0


def test_d_paired_latency_cost_grows_with_cross_boundary_messages():
    """Same degrees and micro-batches, PP-out: the time added by 2,000 km of fibre is larger for
    interleaved 1F1B (2v-1 crossings per pass) than for 1F1B (one)."""
    near, far = _scen("llama3-8b", {"distance_km": 1}, 1024), _scen("llama3-8b", {"distance_km": 2000}, 1024)
    base = dict(tp=8, pp=4, dp=256, placement="pp_out", dp_flavour="zero1", micro_batch=1)
    from autotune.specs import Config
    cost = {}
    for sched, v in (("1f1b", 1), ("interleaved_1f1b", 4)):
        cfg = Config(**base, pp_schedule=sched, pp_chunks=v)
        cost[sched] = evaluate(far, cfg).iteration_time_s - evaluate(near, cfg).iteration_time_s
    assert cost["interleaved_1f1b"] > cost["1f1b"] > 0


# (e) -------------------------------------------------------------------------------------------
def transport_time(s, lb, qps, lr="sr"):
    prod = production_config(s).model_copy(update={"collective": "hierarchical"})
    return evaluate(s, prod.model_copy(update={"xb_load_balancing": lb, "xb_queue_pairs": qps,
                                               "xb_loss_recovery": lr})).iteration_time_s


def test_e_few_flows_ecmp_loses_to_spraying_and_more_qps_close_the_gap():
    """Production parallelism (hierarchical collective) on llama3-70b with 512 ECMP paths: one QP
    per connection is slowest, every doubling of QPs helps, and spraying is at least as fast as
    ECMP with 16 QPs. With 8 paths there are enough flows per path and the gap all but closes.
    (The metro tier derives its path count from uplink / link_Bps: 45.5 TB/s over 512 or 8 links.)"""
    uplink = 4096 * 50e9 / 4.5
    s = scen("llama3-70b", link_Bps=uplink / 512)
    ecmp = [transport_time(s, "ecmp", q) for q in (1, 2, 4, 8, 16)]
    assert all(a > b for a, b in zip(ecmp, ecmp[1:]))
    for spray in (transport_time(s, "packet_spray", 1), transport_time(s, "qp_spray", 16)):
        assert spray <= ecmp[-1] < ecmp[0]
    few = scen("llama3-70b", link_Bps=uplink / 8)
    gap_many_paths = ecmp[0] / transport_time(s, "packet_spray", 1) - 1
    gap_few_paths = transport_time(few, "ecmp", 1) / transport_time(few, "packet_spray", 1) - 1
    assert gap_few_paths < gap_many_paths


# (f) -------------------------------------------------------------------------------------------
@pytest.mark.slow      # 32 s: CI's slow suite runs it (default suite under 10 minutes)
def test_f_go_back_n_loses_far_more_than_selective_repeat_as_distance_times_loss_grows():
    """A DP-out DDP ring on llama3-70b, one queue pair: go-back-N's penalty over selective repeat
    grows with distance x loss, from nothing to tens of percent (each loss stalls the NCCL window for
    a round trip); 16 queue pairs split the window and cut the penalty several-fold; the best
    configuration restricted to go-back-N stays closer still to the best with selective repeat."""
    from autotune.specs import Config
    cfg = Config(tp=8, cp=2, pp=1, dp=512, placement="dp_out", dp_flavour="ddp", micro_batch=1, recompute="selective",
                 overlap_dp=0, collective="ring")
    one_qp, many_qp, best = [], [], []
    for d, loss in ((1, 1e-6), (100, 1e-4), (500, 1e-3)):
        s = scen("llama3-70b", distance_km=d, loss_rate=loss)
        for out, q in ((one_qp, 1), (many_qp, 16)):
            t = {lr: evaluate(s, cfg.model_copy(update={"xb_loss_recovery": lr, "xb_queue_pairs": q})).iteration_time_s
                 for lr in ("gbn", "sr")}
            assert t["sr"] <= t["gbn"]
            out.append(t["gbn"] / t["sr"] - 1)
        b = best_by(s, ("xb_loss_recovery",), where={"placement": ("dp_out",)})
        best.append(b[("gbn",)].iteration_time_s / b[("sr",)].iteration_time_s - 1)
    assert one_qp == sorted(one_qp) and one_qp[0] < 0.001 and one_qp[-1] > 0.3
    assert all(m < o / 3 for m, o in zip(many_qp[1:], one_qp[1:]))
    assert best[-1] <= many_qp[-1]
