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


CHROMIUM = "/usr/bin/chromium"
"""Debian's Chromium (installed by .ci/run: apt-get install chromium); Playwright drives it, so no
browser is downloaded."""


@pytest.mark.slow
def test_the_study_report_renders_in_a_real_headless_browser(tmp_path):
    """Issue 18 item 5: the HTML report of a 300-trial study, opened in headless Chromium: it
    renders, every image is decoded (none missing), no console error (the write time is printed)."""
    from playwright.sync_api import sync_playwright

    from autotune.htmlreport import write_study_report
    from autotune.study import run_study
    storage = f"sqlite:///{tmp_path}/s.db"
    run_study("llama3-70b", "metro-2bldg", gpus=256, global_batch=128, strategy="tpe", trials=300, storage=storage,
              study_name="rep", track=False)
    seconds = write_study_report(storage, "rep", tmp_path / "r.html")
    # the write time is a figure, printed, not asserted (the brief: no timing assert in a test): 2-5 s on
    # this project's VM, 12.3 s on 2026-11-28's ~3x slower VM phase, where the assert failed CI
    print(f"report of a 300-trial study written in {seconds:.2f} s")
    errors = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((tmp_path / "r.html").as_uri())
        page.wait_for_load_state("load")
        images = page.evaluate("[...document.images].map(i => [i.alt, i.complete, i.naturalWidth])")
        title = page.title()
        browser.close()
    assert title.startswith("autotune study report") and not errors
    assert all(done and width > 100 for _alt, done, width in images), images
    want = {"convergence", "breakdowns", "breakdown and attribution"}
    # the pipeline timeline where the best configuration has a pipeline; else the report says so
    text = (tmp_path / "r.html").read_text()
    if "No pipeline (pp = 1): no timeline." not in text:
        want.add("pipeline timeline")
    assert want <= {a for a, *_ in images} and len(images) >= len(want), images


def test_report_through_the_cli(tmp_path):
    storage = f"sqlite:///{tmp_path}/s.db"
    code, out, err = run_cli(["study", *SCEN, "--strategy", "random", "--trials", "12", "--storage", storage,
                              "--study-name", "r", "--no-tracking", "--json"])
    assert code == 0, err
    code, out, err = run_cli(["report", "--study-name", "r", "--storage", storage, "--out", str(tmp_path / "r.html"),
                              "--json"])
    assert code == 0, err
    text = (tmp_path / "r.html").read_text()
    # four figures, the pipeline timeline among them unless the best configuration has no pipeline
    images = text.count("src='data:image/png;base64,")
    assert images >= 4 or (images == 3 and "No pipeline (pp = 1): no timeline." in text), images
    assert "<script" not in text and "http" not in text
    code, out, err = run_cli(["report", "--study-name", "nope", "--storage", storage, "--out", str(tmp_path / "x.html")])
    assert code == 2 and "--study-name" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(["report", "--study-name", "r", "--storage", storage, "--out", str(tmp_path / "no/x.html")])
    assert code == 2 and "--out" in err


def test_sensitivity_sweeps_are_exact_and_monotone(scen):
    """Issue 18 item 4: at every point the optimum is no slower than the nominal optimum evaluated
    there (it is exact), and it never gets faster as the link gets worse."""
    from autotune.sensitivity import sweep
    from autotune.strategies.exhaustive import exhaustive_search
    nominal = exhaustive_search(SearchSpace(scen)).best_config
    for axis, values, worse_with_value in (("distance", (0, 200, 2000), True), ("bandwidth", (0.25, 1, 2), False),
                                           ("loss", (0, 1e-4, 1e-3), True)):
        r = sweep(scen, axis, values, nominal=nominal)
        best = [p["best_s"] for p in r["points"]]
        for p in r["points"]:
            assert p["best_s"] <= p["nominal_best_s"] + 1e-12
        ordered = best if worse_with_value else best[::-1]
        assert all(a <= b + 1e-12 for a, b in zip(ordered, ordered[1:])), (axis, best)
        if axis == "bandwidth":                        # x1: the nominal link, where the two coincide
            assert r["points"][1]["best_s"] == pytest.approx(r["points"][1]["nominal_best_s"], rel=1e-12)


def test_sensitivity_through_the_cli(tmp_path):
    code, out, err = run_cli(["sensitivity", *SCEN, "--axis", "distance", "--values", "0,100,1000",
                              "--out", str(tmp_path / "s.png"), "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert [p["value"] for p in d["sweeps"][0]["points"]] == [0, 100, 1000] and (tmp_path / "s.png").exists()
    for bad, field in ((["--axis", "latency"], "--axis"), (["--axis", "loss", "--values", "0,x"], "--values"),
                       (["--axis", "loss", "--values", "0.9"], "--values"),
                       (["--cluster", "single-building"], "--cluster")):
        code, out, err = run_cli(["sensitivity", *SCEN, *bad, "--out", str(tmp_path / "s.png")])
        assert code == 2 and field in err and len(err.strip().splitlines()) == 1, (bad, err)


@pytest.mark.parametrize("model, cluster", [("llama3-70b", "metro-2bldg"), ("llama4-maverick", "campus-5bldg"),
                                            ("deepseek-v3", "region-pair")])
def test_per_dimension_bytes_add_up_and_hidden_time_is_never_negative(model, cluster):
    """Issue 18 item 1 (part): the cross-building bytes by parallel dimension add up to the tier's
    total, and the DP collectives' exposed time lies between its floor and its link time."""
    import numpy as np

    from autotune.costmodel import evaluate_batch
    s = build_scenario(model=model, cluster=cluster)
    b = SearchSpace(s).sample(4000, seed=3)
    out = evaluate_batch(s, b, check=False)
    parts = sum(out[f"xb_{d}_bytes_per_gpu"] for d in ("dp", "pp", "ep", "cp"))
    assert np.allclose(parts, out["xb_bytes_per_gpu"], rtol=1e-12, atol=0)
    assert np.all(out["dp_exposed_s"] <= out["dp_link_s"] * (1 + 1e-12) + 1e-15)
    assert np.all(out["dp_exposed_s"] >= 0) and np.all(out["dp_exposed_s"] <= out["dp_comm_s"] + 1e-12)


def test_explain_and_sensitivity_where_nothing_fits_say_so_in_one_line():
    """Review finding: with no configuration in memory, explain and sensitivity tracebacked."""
    tiny = ["--model", "llama3-405b", "--cluster", "local-2bldg", "--gpus", "16"]
    for cmd in (["explain", *tiny], ["sensitivity", *tiny, "--axis", "loss", "--values", "0"]):
        code, out, err = run_cli(cmd)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (cmd, err)
        assert "fits in memory" in err
