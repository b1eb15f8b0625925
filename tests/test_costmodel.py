import numpy as np
import pytest

from autotune.costmodel import BREAKDOWN_KEYS, evaluate, evaluate_batch
from autotune.space import SearchSpace, config_at
from autotune.specs import Config, build_scenario


def test_scalar_path_equals_batch_path(campus):
    space = SearchSpace(campus)
    b = space.sample(3000, seed=3)
    out = evaluate_batch(campus, b)
    for i in range(0, 3000, 7):
        e = evaluate(campus, config_at(b, i))
        assert e.iteration_time_s == pytest.approx(out["iteration_time_s"][i], rel=1e-12)
        assert e.memory_per_gpu_bytes == pytest.approx(out["memory_per_gpu_bytes"][i], rel=1e-12)
        assert e.feasible == bool(out["feasible"][i])


def test_breakdown_sums_to_iteration_time(campus):
    b = SearchSpace(campus).sample(5000, seed=4)
    out = evaluate_batch(campus, b)
    total = sum(out[k] for k in BREAKDOWN_KEYS)
    assert np.allclose(total, out["iteration_time_s"], rtol=1e-9)
    for k in BREAKDOWN_KEYS:
        assert (out[k] >= -1e-12).all(), k


def test_infeasible_reports_missing_bytes(campus):
    cfg = Config(tp=1, pp=1, dp=10240, dp_flavour="ddp", micro_batch=1, recompute="none")
    e = evaluate(campus, cfg, check=False)    # illegal (dp x micro_batch > batch): the model still answers
    assert not e.feasible
    assert e.memory_deficit_bytes > 0
    assert "short by" in e.reason and str(int(e.memory_deficit_bytes)) in e.reason.replace(",", "")


def test_heterogeneous_buildings_run_at_the_slowest_gpu():
    cfg = Config(tp=8, pp=16, dp=80, placement="dp_out", dp_flavour="zero1", pp_schedule="1f1b",
                 micro_batch=1, recompute="selective")
    fast = build_scenario("llama3-405b", "campus-5bldg")
    mixed = build_scenario("llama3-405b", "campus-5bldg", overrides=["cluster.buildings.3.gpu=a100-80gb"])
    slow = build_scenario("llama3-405b", "campus-5bldg", overrides=[f"cluster.buildings.{i}.gpu=a100-80gb" for i in range(5)])
    t_fast, t_mixed, t_slow = (evaluate(s, cfg).iteration_time_s for s in (fast, mixed, slow))
    assert t_fast < t_mixed <= t_slow * (1 + 1e-12)
    b200 = build_scenario("llama3-405b", "campus-5bldg", overrides=[f"cluster.buildings.{i}.gpu=b200" for i in range(5)])
    assert evaluate(b200, cfg).iteration_time_s < t_fast


def test_hsdp_beats_fsdp_when_the_shard_group_spans_buildings():
    s = build_scenario("llama3-70b", "metro-2bldg")
    common = dict(tp=8, pp=4, dp=256, placement="dp_out", pp_schedule="1f1b", micro_batch=1, recompute="selective",
                  collective="ring")
    fsdp = evaluate(s, Config(dp_flavour="fsdp", **common))
    hsdp = evaluate(s, Config(dp_flavour="hsdp", **common))
    assert hsdp.iteration_time_s < fsdp.iteration_time_s
    assert hsdp.traffic["xb_bytes_per_step"] < fsdp.traffic["xb_bytes_per_step"]


def legal(scen, **fields):
    cfg = Config(**fields)
    SearchSpace(scen).check(cfg)
    return cfg


def test_go_back_n_goodput_collapses_with_distance_times_loss():
    """eff_gbn = 1 / (1 + p W) with W = BDP / MTU; selective repeat loses ~1 packet per loss."""
    from autotune.costmodel.network import LB_ECMP, LR_GBN, LR_SR, loss_efficiency
    ratios = []
    for km, loss in ((10, 1e-6), (100, 1e-5), (400, 1e-4)):
        rtt = 2 * (10e-6 + 5e-6 * km)
        gbn = loss_efficiency(LR_GBN, LB_ECMP, 50e9, rtt, loss, 4096)
        sr = loss_efficiency(LR_SR, LB_ECMP, 50e9, rtt, loss, 4096)
        ratios.append(float(sr / gbn))
    assert 1 <= ratios[0] < ratios[1] < ratios[2] and ratios[2] > 4


def test_go_back_n_slows_a_cross_region_ring_more_as_loss_grows():
    base = dict(tp=8, cp=2, pp=1, dp=512, placement="dp_out", dp_flavour="ddp", micro_batch=1, recompute="full",
                collective="ring", xb_load_balancing="ecmp", xb_queue_pairs=16, overlap_dp=0)
    gaps = []
    for loss in (1e-6, 1e-5, 1e-4, 1e-3):
        s = build_scenario("llama3-8b", "region-pair", overrides=["cluster.cross_region.distance_km=100",
                                                                  f"cluster.cross_region.loss_rate={loss}"])
        gbn = evaluate(s, legal(s, xb_loss_recovery="gbn", **base)).iteration_time_s
        sr = evaluate(s, legal(s, xb_loss_recovery="sr", **base)).iteration_time_s
        gaps.append(gbn - sr)
    # small losses hide behind in-building ECMP limits; large ones dominate the ring
    assert 0 <= gaps[0] <= gaps[1] <= gaps[2] < gaps[3]


def test_ecmp_collisions_and_queue_pairs_per_flow():
    """Many flows on few links: ECMP < more QPs < QP spraying / packet spraying (near fair share).
    Few flows on many links: every flow runs at its NIC whatever the load balancing."""
    from autotune.costmodel.network import LB_ECMP, LB_PACKET_SPRAY, LB_QP_SPRAY, per_flow_rate_Bps
    uplink, nic, paths = 45.5e12, 50e9, 455
    fair = uplink / 1024

    def rate(lb, q, flows):
        return float(per_flow_rate_Bps(lb, float(q), float(flows), uplink, nic, paths))
    ecmp = [rate(LB_ECMP, q, 1024) for q in (1, 4, 16)]
    assert ecmp[0] < ecmp[1] < ecmp[2] < fair
    assert rate(LB_QP_SPRAY, 16, 1024) >= ecmp[2]
    assert rate(LB_PACKET_SPRAY, 1, 1024) == pytest.approx(0.95 * fair)
    assert rate(LB_ECMP, 1, 8) == nic


def test_cross_building_all_to_all_prefers_spraying():
    s = build_scenario("llama4-maverick", "metro-2bldg")
    base = dict(tp=4, ep=8, pp=1, dp=2048, placement="ep_out", dp_flavour="fsdp", micro_batch=1,
                recompute="full", collective="hierarchical")
    ep = {}
    for lb, q, lr in (("ecmp", 1, "gbn"), ("ecmp", 16, "gbn"), ("packet_spray", 1, "sr")):
        ep[(lb, q)] = evaluate(s, legal(s, xb_load_balancing=lb, xb_queue_pairs=q, xb_loss_recovery=lr,
                                        **base)).breakdown["ep_comm_s"]
    assert ep[("ecmp", 1)] > ep[("ecmp", 16)] > ep[("packet_spray", 1)]


def test_public_api():
    from autotune import Config as C2, Scenario, SearchSpace as S2, evaluate as ev, evaluate_batch as evb  # noqa: F401
    s = build_scenario("llama3-8b", "single-building")
    assert isinstance(s, Scenario)
    b = S2(s).sample(4, seed=0)
    assert len(evb(s, b)["iteration_time_s"]) == 4


def _llama8b_metro(**workload):
    over = [f"workload.{k}={v}" for k, v in workload.items()]
    return build_scenario("llama3-8b", "metro-2bldg", gpus=256, overrides=over)


def test_fp32_precision_doubles_the_bytes_on_the_wire():
    """precision=fp32 (the CPU reference workload): activations, gathered weights and reduced
    gradients move 4 bytes per element instead of bf16's 2 (a bf16 run that reduces in bf16:
    Megatron's default reduces its fp32 gradient buffer in fp32, test_grad_reduce_dtype)."""
    c = Config(tp=1, pp=2, dp=128, dp_flavour="ddp", pp_schedule="1f1b", micro_batch=1)
    bf16 = evaluate(_llama8b_metro(grad_reduce_dtype="bf16"), c)
    fp32 = evaluate(_llama8b_metro(precision="fp32"), c)
    assert fp32.traffic["xb_bytes_per_step"] == pytest.approx(2 * bf16.traffic["xb_bytes_per_step"])
    assert fp32.iteration_time_s > bf16.iteration_time_s          # half the peak, twice the bytes
    assert fp32.memory_per_gpu_bytes > bf16.memory_per_gpu_bytes


def test_fsdp_regather_policies_order_traffic_and_memory():
    """every_pass (ZeRO-3: 3 collectives per micro-batch) moves the most bytes and holds the least;
    never (one all-gather and one reduce-scatter per step) moves exactly ZeRO-1's bytes and holds
    unsharded weights and gradients; forward lies between."""
    c = Config(tp=1, pp=2, dp=128, dp_flavour="fsdp", pp_schedule="1f1b", micro_batch=1)
    ev = {p: evaluate(_llama8b_metro(fsdp_regather=p), c) for p in ("every_pass", "forward", "never")}
    xb = {p: e.traffic["xb_bytes_per_step"] for p, e in ev.items()}
    mem = {p: e.memory_per_gpu_bytes for p, e in ev.items()}
    assert xb["every_pass"] > xb["forward"] > xb["never"]
    assert mem["every_pass"] < mem["forward"] < mem["never"]
    # (Megatron reduces ZeRO-1's fp32 buffer in fp32 and its FSDP gradients in bf16: the same dtype here)
    zero1 = evaluate(_llama8b_metro(grad_reduce_dtype="bf16"), c.model_copy(update={"dp_flavour": "zero1"}))
    assert xb["never"] == pytest.approx(zero1.traffic["xb_bytes_per_step"])
    assert ev["every_pass"].iteration_time_s >= ev["never"].iteration_time_s


def test_the_default_regather_policy_leaves_scenario_keys_unchanged():
    """Studies stored before the field existed resume: the default is left out of the key."""
    a, b = _llama8b_metro(), _llama8b_metro(fsdp_regather="forward")
    assert a.key != b.key and a.key == _llama8b_metro(fsdp_regather="every_pass").key
    assert "fsdp_regather" not in a.model_dump_json(exclude={"workload": {"fsdp_regather"}})


@pytest.mark.parametrize("cfg, field, words", [
    (dict(tp=8, pp=4, dp=3), "config.dp", "tp*cp*pp*dp"),                     # 96 of the 10,240 GPUs
    (dict(tp=16, pp=16, dp=40), "config.tp", "NVLink domain"),
    (dict(tp=8, pp=16, dp=80, pp_schedule="zbv", pp_chunks=1), "config.pp_chunks", "2 for zbv"),
])
def test_library_rejects_illegal_configurations(campus, cfg, field, words):
    """evaluate and evaluate_batch apply the CLI's rules (issue 15): one line naming the rule."""
    from autotune.errors import UserInputError
    from autotune.space import batch_from_configs
    c = Config(**cfg)
    with pytest.raises(UserInputError) as e:
        evaluate(campus, c)
    assert str(e.value).startswith(field) and words in str(e.value) and "\n" not in str(e.value)
    ok = Config(tp=8, pp=16, dp=80, micro_batch=1)
    with pytest.raises(UserInputError) as e:
        evaluate_batch(campus, batch_from_configs([ok, ok, c]))
    assert str(e.value).startswith(f"{field} (row 2 of 3)")
    # the opt-out answers with the model's number, as before
    assert evaluate(campus, c, check=False).iteration_time_s > 0
    assert len(evaluate_batch(campus, batch_from_configs([ok, c]), check=False)["iteration_time_s"]) == 2


def test_poisson_cdf_matches_scipy():
    from scipy.special import pdtr

    from autotune.costmodel.network import poisson_cdf
    for lam in (1e-3, 0.5, 1.0, 7.0, 64.0, 500.0, 2000.0):
        kmax = int(lam + 12 * lam ** 0.5 + 30)
        assert np.max(np.abs(poisson_cdf(kmax, lam) - pdtr(np.arange(kmax + 1), lam))) < 1e-10


@pytest.mark.parametrize("field, value, words", [("placement", 7, "a code 0..4"), ("placement", -1, "a code 0..4"),
                                                 ("micro_batch", 0, "from 1 to"), ("recompute", 3, "a code 0..2")])
def test_library_rejects_codes_and_integers_out_of_range(field, value, words):
    from autotune.errors import UserInputError
    s = build_scenario("llama3-8b", "metro-2bldg", gpus=64)
    b = SearchSpace(s).sample(4, seed=0)
    b[field] = b[field].copy()
    b[field][1] = value
    with pytest.raises(UserInputError) as e:
        evaluate_batch(s, b)
    assert str(e.value).startswith(f"config.{field} (row 1 of 4): got {value}") and words in str(e.value)


def test_small_kernels_at_high_tp_are_launch_bound():
    """A layer pass takes at least the host's time to issue it (host_floor.host_launch_time): at tp 8
    an 8B model's micro-batch of one sequence runs layers of about a millisecond of compute and
    TP collectives, so at 2 ms of host time a layer the passes wait for the host and the step
    grows by about the breakdown's host_s; at tp 1 with full recomputation
    the same layers outlast their launches."""
    from autotune.costmodel.params import default_params
    scen = build_scenario("llama3-8b", "metro-2bldg")
    scen = scen.model_copy(update={"cluster": scen.cluster.with_total_gpus(512)})   # 512 sequences of 8,192 tokens
    p0 = default_params().with_values(host_layer_fwd_us=0.0)
    p2 = p0.with_values(host_layer_fwd_us=2000.0)
    wide = Config(tp=8, pp=1, dp=64, dp_flavour="zero1", micro_batch=1, recompute="none")
    narrow = Config(tp=1, pp=1, dp=512, dp_flavour="zero1", micro_batch=1, recompute="full")
    w0, w2 = evaluate(scen, wide, p0), evaluate(scen, wide, p2)
    host = w2.breakdown["host_s"]
    assert host > 0.05 * w2.iteration_time_s and w0.breakdown["host_s"] == 0.0
    grown = (w2.iteration_time_s - w0.iteration_time_s) / host
    # the straggler factor scales it up; the longer passes hide more of the step-end DP exchange
    # (host_floor.dp_windows), which takes back no more than the last pass's gap
    hidden = w0.breakdown["dp_comm_s"] - w2.breakdown["dp_comm_s"]
    assert 0.0 < hidden <= host / 8 * (1 + 1e-9) and 0.85 <= grown < 1.1, (grown, hidden)   # 8 micro-batches
    assert evaluate(scen, narrow, p2).breakdown["host_s"] == 0.0
