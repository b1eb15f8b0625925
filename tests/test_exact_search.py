"""The pruned exhaustive search is exact: same optimum as evaluating every legal row."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel import evaluate_batch
from autotune.costmodel.bounds import bound_params, transport_free
from autotune.space import SearchSpace, config_at
from autotune.specs import build_scenario
from autotune.strategies.exhaustive import exhaustive_search

CASES = [("llama3-8b", "metro-2bldg", ("cluster.cross_building.distance_km=300",)),
         ("mixtral-8x7b", "campus-5bldg", ("cluster.cross_building.oversubscription=8",)),
         ("llama3-70b", "region-pair", ()),
         ("llama3-8b", "single-building", ())]
SLOW = pytest.mark.slow      # the larger brute-force scans (18 s and 8 s) run in the slow suite (CI runs it)
BRUTE_CASES = [CASES[0], pytest.param(*CASES[1], marks=SLOW), pytest.param(*CASES[2], marks=SLOW), CASES[3]]


def brute_force(space):
    best_t, best_cfg = np.inf, None
    for b in space.enumerate(1 << 17):
        out = evaluate_batch(space.scenario, b)
        times = np.where(out["feasible"], out["iteration_time_s"], np.inf)
        i = int(np.argmin(times))
        if times[i] < best_t:
            best_t, best_cfg = float(times[i]), config_at(b, i)
    return best_t, best_cfg


@pytest.mark.parametrize("model,cluster,over", BRUTE_CASES)
def test_pruned_search_equals_brute_force(model, cluster, over):
    space = SearchSpace(build_scenario(model, cluster, gpus=512 if cluster != "campus-5bldg" else 640,
                                       overrides=list(over)), cp_values=(1, 2), micro_batches=(1, 2))
    t, cfg = brute_force(space)
    res = exhaustive_search(space)
    assert res.best_iteration_time_s == t
    assert res.best_config == cfg
    assert res.legal_count == space.legal_count()
    # what was evaluated in full: some, never more than what fits, and the pruned share says so
    assert 0 < res.evaluated_count <= res.feasible_count <= res.legal_count
    assert res.pruned_fraction == pytest.approx(1 - res.evaluated_count / res.legal_count)


def test_search_says_how_much_was_pruned():
    from tests.test_hardening import run
    code, out, err = run(["search", "--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "512"])
    assert code == 0, err
    assert "evaluated in full" in out and "proved out by memory or the lower bound" in out
    import json
    code, out, _ = run(["search", "--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "512", "--json"])
    d = json.loads(out)
    assert 0 < d["evaluated_count"] <= d["feasible_count"] and 0 <= d["pruned_fraction"] < 1


@settings(max_examples=20, deadline=None)
@given(case=st.sampled_from(CASES[:3]), seed=st.integers(0, 2**31))
def test_free_network_bound_is_admissible(case, seed):
    """Every legal row, every transport (NCCL's own choices included): the row with its
    transport-dependent terms dropped is never slower than with them."""
    model, cluster, over = case
    scen = build_scenario(model, cluster, overrides=list(over))
    b = SearchSpace(scen).sample(2000, seed=seed)
    real = evaluate_batch(scen, b)["iteration_time_s"]
    lb = evaluate_batch(transport_free(scen), b, bound_params(None))["iteration_time_s"]
    assert (lb <= real * (1 + 1e-12)).all()


@SLOW           # 10 s of brute force; the only proof that --top K is exact, so CI's slow suite runs it
def test_top_k_equals_brute_force():
    """``top_k``: the K fastest of the whole legal space, in order, ties by enumeration order."""
    space = SearchSpace(build_scenario("llama3-8b", "metro-2bldg", gpus=512,
                                       overrides=["cluster.cross_building.distance_km=300"]),
                        cp_values=(1, 2), micro_batches=(1, 2))
    times, cfgs, offset = [], [], 0
    for b in space.enumerate(1 << 17):
        out = evaluate_batch(space.scenario, b, check=False)
        t = np.where(out["feasible"], out["iteration_time_s"], np.inf)
        for i in np.argsort(t, kind="stable")[:25]:
            times.append((float(t[i]), offset + int(i)))
            cfgs.append(config_at(b, int(i)))
        offset += len(t)
    order = sorted(range(len(times)), key=lambda j: times[j])[:25]
    res = exhaustive_search(space, top_k=25)
    assert [t for _, t in res.top] == [times[j][0] for j in order]
    assert [c for c, _ in res.top] == [cfgs[j] for j in order]
    assert res.best_config == res.top[0][0] and res.best_iteration_time_s == res.top[0][1]


@pytest.fixture(scope="module")
def scanned():
    """A small space and every legal row of it evaluated, in enumeration order."""
    space = SearchSpace(build_scenario("llama3-8b", "metro-2bldg", gpus=512,
                                       overrides=["cluster.cross_building.distance_km=300"]),
                        cp_values=(1, 2), micro_batches=(1, 2))
    parts = [(b, evaluate_batch(space.scenario, b, check=False)) for b in space.enumerate(1 << 17)]
    rows = {f: np.concatenate([b[f] for b, _ in parts]) for f in parts[0][0]}
    times = np.concatenate([np.where(o["feasible"], o["iteration_time_s"], np.inf) for _, o in parts])
    return space, rows, times


def brute_force_by(rows, times, group, where):
    """Best (time, config) per value of ``group`` over every legal row passing ``where``."""
    from autotune.analysis import _codes, _name
    keep = np.isfinite(times)
    for f, values in where.items():
        keep &= np.isin(rows[f], _codes(f, values))
    idx = np.flatnonzero(keep)
    keys = np.stack([rows[f][idx] for f in group], axis=1) if group else np.zeros((len(idx), 0), int)
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.lexsort((idx, times[idx], inv))
    best = {}
    for j in order[np.r_[0, np.flatnonzero(np.diff(inv[order])) + 1]]:
        i = int(idx[j])
        best[tuple(_name(f, int(rows[f][i])) for f in group)] = (float(times[i]), config_at(rows, i))
    return best


@pytest.mark.parametrize("group,where", [
    (("placement",), {"placement": ("dp_out", "pp_out")}),
    pytest.param(("tp", "pp"), {}, marks=SLOW),    # many small groups: the case a loose bound fails (17 s)
    pytest.param(("dp_flavour",), {"recompute": ("selective", "full")}, marks=SLOW),
    pytest.param(("collective",), {}, marks=SLOW),  # a transport knob: scanned in full (3 s)
    ((), {"pp_schedule": ("1f1b",)}),
])
def test_best_by_equals_brute_force_per_group(scanned, group, where):
    """``analysis.best_by`` prunes per group by the transport-free bound: every group's best time
    and configuration are those of a full scan (ties by enumeration order)."""
    from autotune.analysis import best_by
    space, rows, times = scanned
    want = brute_force_by(rows, times, group, where)
    got = {k: v for k, v in best_by(space.scenario, group, where=where, space=space).items() if v.feasible}
    assert set(got) == set(want)
    for key, (t, cfg) in want.items():
        assert got[key].iteration_time_s == t, key
        assert got[key].config == cfg, key


def test_all_cores_give_the_one_process_result():
    """Waves of chunks in forked workers, pruned by the bound known when each wave starts: the
    same top K, in the same order, as one process (small chunks: many waves)."""
    space = SearchSpace(build_scenario("llama3-8b", "metro-2bldg", gpus=512,
                                       overrides=["cluster.cross_building.distance_km=300"]),
                        cp_values=(1, 2), micro_batches=(1, 2))
    one = exhaustive_search(space, top_k=25, workers=1, chunk_rows=1 << 12)
    many = exhaustive_search(space, top_k=25, workers=3, chunk_rows=1 << 12)
    assert many.top == one.top
    assert many.feasible_count == one.feasible_count
    assert one.evaluated_count <= many.evaluated_count <= one.feasible_count   # a stale bound prunes less
    ticks = []
    exhaustive_search(space, workers=2, chunk_rows=1 << 12, progress=ticks.append)
    assert sum(ticks) == space.legal_count()


def test_search_full_space_and_its_bad_input():
    """``--space full`` opens every transport knob (45x the default grid); ``--workers`` and a
    ``--top`` beyond the legal count are one-line errors before any work."""
    import json

    from tests.test_hardening import run
    base = ["search", "--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "64", "--json"]
    code, out, err = run(base)
    assert code == 0, err
    default = json.loads(out)
    code, out, err = run(base + ["--space", "full", "--workers", "2"])
    assert code == 0, err
    full = json.loads(out)
    assert full["legal_count"] == 45 * default["legal_count"]
    assert full["best"]["iteration_time_s"] <= default["best"]["iteration_time_s"]
    for extra, field in ((["--workers", "0"], "--workers"), (["--top", str(default["legal_count"] + 1)], "--top"),
                         (["--space", "huge"], "--space")):
        code, out, err = run(base + extra)
        assert code == 2 and field in err and len(err.strip().splitlines()) == 1, (extra, err)


@pytest.mark.slow      # ~15 s; the default run keeps its faster siblings, CI runs this (.ci/run)
def test_best_by_scans_a_transport_group_in_full(scanned, monkeypatch):
    """A group naming a transport knob cannot be pruned per group (the legal core holds transport
    knobs at their first value): with selective-repeat rows made slower below a threshold (the
    bound stays admissible), each group's best is still the full scan's."""
    import autotune.analysis as analysis
    from autotune.specs.codes import LossRecovery
    space, rows, times = scanned
    real = analysis.evaluate_batch
    cut = 3.0 * float(np.min(times))

    def penalised(scen, b, params=None, check=True):
        out = dict(real(scen, b, params, check=check))
        t = out["iteration_time_s"]
        out["iteration_time_s"] = np.where((b["xb_loss_recovery"] == LossRecovery.SR) & (t < cut), t + 10.0, t)
        return out
    monkeypatch.setattr(analysis, "evaluate_batch", penalised)
    t_pen = penalised(space.scenario, rows)["iteration_time_s"]
    t_pen = np.where(np.isfinite(times), t_pen, np.inf)
    want = brute_force_by(rows, t_pen, ("xb_loss_recovery",), {})
    got = analysis.best_by(space.scenario, ("xb_loss_recovery",), space=space)
    for key, (t, cfg) in want.items():
        assert got[key].iteration_time_s == t and got[key].config == cfg, key
