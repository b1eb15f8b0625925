"""Buildings of different GPU speeds sharing work by speed (``hetero_split``, hetero.hetero_shares)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel import evaluate, evaluate_batch
from autotune.costmodel.bounds import bound_params, transport_free
from autotune.errors import UserInputError
from autotune.space import SearchSpace, config_at
from autotune.specs import build_scenario
from autotune.specs.codes import HeteroSplit, Placement
from autotune.specs.config import Config
from autotune.strategies.exhaustive import exhaustive_search

A100_OUT = ["cluster.buildings.3.gpu=a100-80gb", "cluster.buildings.4.gpu=a100-80gb"]


@pytest.fixture(scope="module")
def mixed():
    return build_scenario("llama3-405b", "campus-5bldg", overrides=A100_OUT)


def without_slow_buildings(scen, keep: int):
    """The first ``keep`` buildings alone, at the same global batch (the default one is rounded
    per building count)."""
    c = scen.cluster
    return scen.model_copy(update={"cluster": c.model_copy(update={"buildings": c.buildings[:keep]}),
                                   "workload": scen.workload.model_copy(update={"global_batch_seqs": scen.global_batch_seqs})})


def test_the_knob_exists_only_where_buildings_differ(mixed):
    assert SearchSpace(mixed).hetero_values == (HeteroSplit.EVEN, HeteroSplit.BY_SPEED)
    uniform = build_scenario("llama3-405b", "campus-5bldg")
    assert SearchSpace(uniform).hetero_values == (HeteroSplit.EVEN,)
    cfg = Config(tp=8, pp=16, dp=80, placement="dp_out", hetero_split="by_speed", micro_batch=1)
    with pytest.raises(UserInputError, match="hetero_split"):
        evaluate(uniform, cfg)
    two = build_scenario("llama3-70b", "metro-2bldg", overrides=["cluster.buildings.1.gpu=a100-80gb"])
    cp_out = Config(tp=8, cp=2, pp=4, dp=128, placement="cp_out", micro_batch=1)
    evaluate(two, cp_out)
    with pytest.raises(UserInputError, match="hetero_split"):     # cp spread over buildings: not dp_out / pp_out
        evaluate(two, cp_out.model_copy(update={"hetero_split": "by_speed"}))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_by_speed_is_never_slower_than_even(mixed, seed):
    """The even split is one of the shares by_speed may take, so the pipeline never loses (the
    step-end DP exposure, which a faster last backward hides less of, may grow)."""
    space = SearchSpace(mixed)
    b = space.sample(3000, seed=seed)
    b = {k: v[b["hetero_split"] == HeteroSplit.BY_SPEED] for k, v in b.items()}
    even = dict(b, hetero_split=np.full_like(b["hetero_split"], HeteroSplit.EVEN))
    fast, slow = evaluate_batch(mixed, b), evaluate_batch(mixed, even)
    # the step-end DP exposure may grow: a faster last backward hides less of it
    assert (fast["iteration_time_s"] - fast["dp_exposed_s"]
            <= (slow["iteration_time_s"] - slow["dp_exposed_s"]) * (1 + 1e-12)).all()
    # the fastest replicas take more micro-batches: never fewer in flight, so never less memory
    dp_out = b["placement"] == Placement.DP_OUT
    assert (fast["memory_per_gpu_bytes"][dp_out] >= slow["memory_per_gpu_bytes"][dp_out] * (1 - 1e-12)).all()
    # the breakdown still adds up to the iteration time
    from autotune.costmodel.iteration import BREAKDOWN_KEYS
    total = sum(fast[k] for k in BREAKDOWN_KEYS)
    assert np.allclose(total, fast["iteration_time_s"], rtol=1e-9)


def test_dp_shares_follow_speed(mixed):
    """dp_out by speed: about the continuous share's time, sum_j(w_j s_j) times faster in compute
    than the even split when compute dominates (H100 about 3x the A100 here)."""
    cfg = Config(tp=8, pp=16, dp=80, placement="dp_out", dp_flavour="zero1", micro_batch=1, recompute="selective")
    even = evaluate(mixed, cfg)
    by = evaluate(mixed, cfg.model_copy(update={"hetero_split": "by_speed"}))
    from autotune.costmodel.params import default_params
    from autotune.costmodel.hetero import speed_types
    types = speed_types(mixed, default_params())
    mean_speed = sum(ty.speed * ty.share for ty in types)
    ratio = even.breakdown["compute_s"] / by.breakdown["compute_s"]
    assert 1.0 < ratio <= mean_speed * (1 + 1e-9)
    assert ratio > 0.8 * mean_speed              # whole micro-batches lose a little, not most


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_the_search_bound_stays_admissible_on_mixed_buildings(mixed, seed):
    b = SearchSpace(mixed).sample(3000, seed=seed)
    real = evaluate_batch(mixed, b)["iteration_time_s"]
    lb = evaluate_batch(transport_free(mixed), b, bound_params(None))["iteration_time_s"]
    assert (lb <= real * (1 + 1e-12)).all()


def brute_force_best(scen, space):
    """(seconds, Config) of the fastest feasible configuration, every legal one evaluated."""
    best_t, best_cfg = np.inf, None
    for b in space.enumerate(1 << 17):
        out = evaluate_batch(scen, b, check=False)
        t = np.where(out["feasible"], out["iteration_time_s"], np.inf)
        i = int(np.argmin(t))
        if t[i] < best_t:
            best_t, best_cfg = float(t[i]), config_at(b, i)
    return best_t, best_cfg


def test_exact_search_on_mixed_buildings_equals_brute_force():
    scen = build_scenario("llama3-8b", "metro-2bldg", gpus=256, overrides=["cluster.buildings.1.gpu=a100-80gb"])
    space = SearchSpace(scen, cp_values=(1, 2), micro_batches=(1, 2))
    best_t, best_cfg = brute_force_best(scen, space)
    res = exhaustive_search(space)
    assert res.best_iteration_time_s == best_t and res.best_config == best_cfg
    assert best_cfg.hetero_split == "by_speed"


def test_every_building_beats_leaving_the_slow_ones_out(mixed):
    """Issue 16's mixed-hardware figure: three H100 and two A100 buildings. Even shares run every
    rank at the A100's pace and lose to the three H100 buildings alone; shares by speed win."""
    best_all = exhaustive_search(SearchSpace(mixed))
    even_only = exhaustive_search(SearchSpace(mixed, hetero=("even",)))
    three = exhaustive_search(SearchSpace(without_slow_buildings(mixed, 3)))
    assert even_only.best_iteration_time_s > three.best_iteration_time_s
    assert best_all.best_iteration_time_s < three.best_iteration_time_s
    assert best_all.best_config.hetero_split == "by_speed"


def test_search_compares_every_building_with_the_fastest_alone():
    """``search`` on mixed GPUs also solves the fastest buildings alone (same global batch) and
    says which is faster; on one GPU type it does not."""
    import json

    from tests.test_hardening import run
    base = ["search", "--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "128", "--json"]
    code, out, err = run(base + ["--set", "cluster.buildings.1.gpu=a100-80gb"])
    assert code == 0, err
    d = json.loads(out)
    alone = d["fastest_buildings_only"]
    assert alone["buildings"] == 1 and alone["gpus"] == 64
    assert alone["every_building_gain_pct"] == pytest.approx(100 * (alone["iteration_time_s"] / d["best"]["iteration_time_s"] - 1))
    code, out, err = run(base)
    assert code == 0 and "fastest_buildings_only" not in json.loads(out)
    code, out, err = run(base[:-1] + ["--set", "cluster.buildings.1.gpu=a100-80gb"])
    assert "fastest buildings alone (1 buildings, 64 GPUs, same global batch)" in out


def test_dp_shares_keep_the_slow_replicas_fill_and_drain():
    """dp_out by speed: every replica pays its pipeline's fill and drain at its own pace, so the
    step is at least the slow replica's (m_slow + fill) x its pace; the review's example (70B,
    an A100 building beside an H100 one, 1F1B over 16 stages, 16 micro-batches a replica)."""
    from autotune.costmodel.iteration import _scalar_row, iteration_formulas
    from autotune.costmodel.params import default_params
    from autotune.costmodel.xp import SCALAR
    s = build_scenario("llama3-70b", "metro-2bldg", gpus=512, overrides=["cluster.buildings.1.gpu=a100-80gb",
                                                                        "workload.global_batch_seqs=64"])
    cfg = Config(tp=8, pp=16, dp=4, placement="dp_out", dp_flavour="zero1", micro_batch=1, hetero_split="by_speed")
    even = evaluate(s, cfg.model_copy(update={"hetero_split": "even"}))
    by = evaluate(s, cfg)
    plan = iteration_formulas(s, _scalar_row(cfg), default_params(), SCALAR)["_hetero_plan"]
    m_slow = min(plan)                                   # the A100 replicas take the fewest
    per_mb = (even.breakdown["compute_s"] + even.breakdown["tp_comm_s"]) / 16      # the A100's pace, 16 a replica
    assert by.iteration_time_s <= even.iteration_time_s
    assert by.iteration_time_s >= (m_slow + 15) * per_mb * 0.9      # 15 = pp - 1 stages to fill and drain


@settings(max_examples=60, deadline=None)
@given(units=st.lists(st.floats(0.2, 1.0), min_size=2, max_size=3),
       raw_w=st.lists(st.floats(0.05, 1.0), min_size=3, max_size=3),
       demand=st.integers(1, 40), offset=st.sampled_from([0.0, 0.5, 3.0]))
def test_whole_shares_are_the_best_whole_shares(units, raw_w, demand, offset):
    """``min_makespan`` against brute force over every whole split: none meeting the demand
    finishes sooner, and its own counts meet the demand at its pace."""
    import itertools

    from autotune.costmodel.hetero import min_makespan
    from autotune.costmodel.xp import SCALAR
    units = [1.0] + units[1:]                     # the slowest type's unit is the longest
    w = np.array(raw_w[:len(units)]) / sum(raw_w[:len(units)])
    span = int(np.ceil(max(units) / min(units))) + 1
    pace, counts = min_makespan(units, list(w), demand, offset, span, SCALAR)
    assert sum(wj * n for wj, n in zip(w, counts)) >= demand - 1e-9
    assert max((n + offset) * u for n, u in zip(counts, units)) == pytest.approx(pace)
    best = np.inf          # every count of all but the last type; the last takes what is left
    for ns in itertools.product(range(1, int(np.ceil(demand / w.min())) + 2), repeat=len(units) - 1):
        rest = demand - sum(wj * n for wj, n in zip(w, ns))
        last = max(1, int(np.ceil(rest / w[-1] - 1e-9)))
        best = min(best, max((n + offset) * u for n, u in zip(ns + (last,), units)))
    assert pace == pytest.approx(best)


def test_each_gpu_type_holds_its_layers_against_its_own_hbm():
    """pp_out by speed on a B200 (180 GB) and an H100 (80 GB) building: the B200 stages hold more
    layers than an even split, the H100 stages fewer, and each type is checked against its own
    HBM. Here (9,216-token sequences) the even split (20 layers a stage) does not fit the H100; by
    speed (27 and 13) it fits, though its B200 ranks hold more than any H100 could."""
    from autotune.costmodel.iteration import _scalar_row, iteration_formulas
    from autotune.costmodel.params import default_params
    from autotune.costmodel.xp import SCALAR
    s = build_scenario("llama3-70b", "metro-2bldg", gpus=512, overrides=["cluster.buildings.0.gpu=b200",
                                                                        "cluster.buildings.1.gpu=h100-sxm",
                                                                        "workload.seq_len=9216"])
    cfg = Config(tp=4, pp=4, dp=32, placement="pp_out", dp_flavour="zero1", micro_batch=1, recompute="none",
                 pp_schedule="1f1b", hetero_split="by_speed")
    plan = iteration_formulas(s, _scalar_row(cfg), default_params(), SCALAR)["_hetero_plan"]
    assert plan[0] > 20 > plan[1] and 2 * (plan[0] + plan[1]) >= 80      # 2 stages a building, 80 layers
    by, even = evaluate(s, cfg), evaluate(s, cfg.model_copy(update={"hetero_split": "even"}))
    h100 = s.cluster.buildings[1].gpu.hbm_bytes
    assert not even.feasible and h100 < even.memory_per_gpu_bytes < 180e9
    assert by.feasible and by.memory_per_gpu_bytes > even.memory_per_gpu_bytes > h100
    assert by.iteration_time_s < even.iteration_time_s


def test_memory_floor_rows_are_a_floor_under_every_transport(mixed):
    """dp_out shares by speed: the busiest replica's share follows each type's pace, exchanges
    included, so memory may change with the transport knobs; the exact search checks those rows
    at the even split's memory (``memory_floor_rows``), never above any transport row's."""
    from autotune.strategies.exhaustive import memory_floor_rows
    space = SearchSpace(mixed, load_balancing=("ecmp", "qp_spray"), loss_recovery=("gbn", "sr"))
    b = space.sample(6000, seed=3)
    floor = evaluate_batch(mixed, memory_floor_rows(b), check=False)
    moved = 0
    for f in ("xb_load_balancing", "xb_loss_recovery", "nccl_channels", "xb_queue_pairs"):
        u = np.unique(b[f])
        alt = dict(b, **{f: np.where(b[f] == u[0], u[-1], u[0])})
        for rows in (b, alt):
            out = evaluate_batch(mixed, rows, check=False)
            assert (floor["memory_per_gpu_bytes"] <= out["memory_per_gpu_bytes"] * (1 + 1e-12)).all()
            assert (floor["feasible"] | ~out["feasible"]).all()
        moved += int((~np.isclose(evaluate_batch(mixed, alt, check=False)["memory_per_gpu_bytes"],
                                  evaluate_batch(mixed, b, check=False)["memory_per_gpu_bytes"])).sum())
    assert moved > 0        # the case is real: some rows' memory moves with a transport knob


def test_exact_search_on_mixed_buildings_with_transport_knobs_equals_brute_force():
    """The same as above with two NCCL channel counts and both loss recoveries: the knobs that
    move a dp_out by-speed row's micro-batch shares, and with them its memory."""
    scen = build_scenario("llama3-8b", "metro-2bldg", gpus=256, overrides=["cluster.buildings.1.gpu=a100-80gb"])
    space = SearchSpace(scen, cp_values=(1,), micro_batches=(1, 2), channels=(4, 16), loss_recovery=("gbn", "sr"),
                        chunks=(2,), schedules=("gpipe", "1f1b"))
    best_t, best_cfg = brute_force_best(scen, space)
    res = exhaustive_search(space, top_k=1)
    assert res.best_iteration_time_s == best_t and res.best_config == best_cfg
