"""Issue 18 (part): ``autotune explain`` (breakdowns, differing knobs, one-factor-at-a-time
attribution) and ``autotune timeline`` (the event simulator's schedule as a picture)."""
from __future__ import annotations

import json

import pytest

from autotune.configparse import make_config, parse_config_text
from autotune.costmodel import evaluate
from autotune.explain import attribute, explain
from autotune.space import SearchSpace
from autotune.specs import build_scenario
from autotune.timeline import timeline
from tests.test_hardening import run as _run


def run_cli(argv):
    return _run(argv)

SCEN = ["--model", "llama3-70b", "--cluster", "metro-2bldg", "--gpus", "256", "--global-batch", "128"]


@pytest.fixture(scope="module")
def scen():
    return build_scenario(model="llama3-70b", cluster="metro-2bldg", gpus=256, global_batch=128)


def cfg(scen, text):
    c = make_config(parse_config_text(text), scen.n_gpus)
    SearchSpace(scen).check(c)
    return c


BASE = "tp=8,pp=8,placement=pp_out,pp_schedule=1f1b,pp_chunks=1,dp_flavour=zero1,micro_batch=1"


def test_a_single_legal_difference_explains_the_whole_gap(scen):
    a = cfg(scen, BASE)
    b = cfg(scen, BASE.replace("pp_schedule=1f1b,pp_chunks=1", "pp_schedule=zbv,pp_chunks=2"))
    att = attribute(scen, SearchSpace(scen), a, b, "base")
    assert [s.factor for s in att.steps] == ["pp_schedule"]
    assert att.steps[0].saved_s == pytest.approx(att.gap_s, rel=1e-12) and abs(att.remainder_s) < 1e-12
    assert att.gap_s == pytest.approx(evaluate(scen, a).iteration_time_s - evaluate(scen, b).iteration_time_s)


def test_each_step_is_the_change_alone_and_the_rest_is_interaction(scen):
    a = cfg(scen, BASE + ",nccl_channels=4,collective=ring")
    b = cfg(scen, BASE.replace("pp_schedule=1f1b,pp_chunks=1", "pp_schedule=interleaved_1f1b,pp_chunks=2")
            + ",nccl_channels=16,collective=hierarchical")
    att = attribute(scen, SearchSpace(scen), a, b, "base")
    t_a = evaluate(scen, a).iteration_time_s
    for s in att.steps:
        fields = dict(kv.split("=") for kv in s.explained.split(","))
        alone = make_config({**a.model_dump(), **fields}, scen.n_gpus)
        assert s.saved_s == pytest.approx(t_a - evaluate(scen, alone).iteration_time_s, rel=1e-12)
    assert {s.factor for s in att.steps} == {"pp_schedule", "nccl_channels", "collective"}
    assert sum(s.saved_s for s in att.steps) + att.remainder_s == pytest.approx(att.gap_s, rel=1e-12)


def test_explain_defaults_to_the_exact_optimum_and_beats_every_baseline(scen):
    d = explain(scen)
    t = d["evaluation"]["iteration_time_s"]
    for name, b in d["baselines"].items():
        if b.get("evaluation") and b["evaluation"]["feasible"]:
            assert t <= b["evaluation"]["iteration_time_s"] + 1e-12, name
            assert b["attribution"]["gap_s"] == pytest.approx(b["evaluation"]["iteration_time_s"] - t)


@pytest.mark.parametrize("sched, chunks", [("1f1b", 1), ("zbv", 2)])
def test_the_timeline_shows_the_simulators_bubble(scen, sched, chunks):
    """Issue 18 figure: the drawn idle time of every rank equals the simulator's bubble (makespan
    minus busy time) at pp 8, and every op of the schedule is drawn once."""
    c = cfg(scen, BASE.replace("pp_schedule=1f1b,pp_chunks=1", f"pp_schedule={sched},pp_chunks={chunks}"))
    tl = timeline(scen, c)
    m = tl.meta["micro_batches"]
    assert len(tl.ops) == (2 if sched == "1f1b" else 3 * 2) * m * 8
    for idle, bubble, xb in zip(tl.idle_s, tl.bubble_s, tl.xb_wait_s):
        assert idle == pytest.approx(bubble, abs=1e-9) and 0 <= xb <= idle + 1e-12
    assert any(x > 0 for x in tl.xb_wait_s)          # pp_out over 2 buildings: someone waits across


def test_explain_and_timeline_through_the_cli(tmp_path):
    code, out, err = run_cli(["explain", *SCEN, "--out", str(tmp_path / "ex"), "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert (tmp_path / "ex" / "explain.png").stat().st_size > 10_000 and set(d["baselines"]) == {
        "production", "naive", "sota"}
    code, out, err = run_cli(["timeline", *SCEN, "--config", BASE.replace("1f1b,pp_chunks=1", "zbv,pp_chunks=2"),
                              "--out", str(tmp_path / "t.png"), "--json"])
    assert code == 0, err
    assert (tmp_path / "t.png").stat().st_size > 10_000 and json.loads(out)["schedule"] == "zbv"


def test_explain_bad_input(tmp_path):
    """Illegal: one line, exit 2, the baselines still drawn. Infeasible: exit 0 with the reason."""
    code, out, err = run_cli(["explain", *SCEN, "--config", "tp=3,pp=8", "--out", str(tmp_path / "ex")])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert (tmp_path / "ex" / "explain.png").exists()
    code, out, err = run_cli(["explain", *SCEN, "--config", "tp=8,pp=1,dp_flavour=ddp,placement=dp_out", "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert not d["evaluation"]["feasible"] and "out of memory" in d["evaluation"]["reason"]
    assert all("attribution" not in b for b in d["baselines"].values())
