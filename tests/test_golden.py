"""The cost model's outputs on a fixed set of scenarios x configurations are pinned
(``tests/golden/costmodel.json``). A change that moves any number fails here; regenerate with
``python tests/golden.py --write`` only on purpose, with the reason in the commit."""
import pytest

import golden


@pytest.fixture(scope="module")
def stored():
    return golden.load()


def test_every_scenario_is_pinned(stored):
    keys = {golden._key(*s) for s in golden.SCENARIOS}
    assert keys == set(stored), "tests/golden.py SCENARIOS and the golden file disagree: run tests/golden.py --write --redraw"
    for key, st in stored.items():
        assert len(st["rows"]) == len(st["outputs"]) >= golden.ROWS_PER_SCENARIO, key
    # the local CPU cluster has less memory than the framework allowance: every row there is infeasible
    with_feasible = [key for key, st in stored.items() if any(o["feasible"] for o in st["outputs"])]
    assert len(with_feasible) >= len(stored) - 1, with_feasible


def test_cost_model_matches_golden_outputs(stored):
    fresh = golden.compute(stored)
    moved = golden.differences(stored, fresh)
    assert not moved, f"{len(moved)} golden values moved (python tests/golden.py --diff):\n" + "\n".join(moved[:40])


def test_a_changed_number_is_caught(stored):
    """The comparison itself can fail: perturb one stored value by 1e-6 relative."""
    key = next(iter(stored))
    fresh = {k: {"rows": v["rows"], "outputs": [dict(o) for o in v["outputs"]]} for k, v in stored.items()}
    fresh[key]["outputs"][0]["iteration_time_s"] *= 1 + 1e-6
    assert len(golden.differences(stored, fresh)) == 1
