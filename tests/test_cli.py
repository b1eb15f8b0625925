"""End-to-end through the real command line."""
import json

import pytest


def test_evaluate_json(run_cli):
    r = run_cli("evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--config",
                "tp=8,pp=8,placement=dp_out,dp_flavour=zero1,pp_schedule=1f1b,recompute=full",
                "--global-batch", "1280", "--simulate", "--json")      # 8 micro-batches: a quick simulation
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["feasible"] and d["iteration_time_s"] > 0
    assert set(d["breakdown"]) >= {"compute_s", "pp_bubble_s", "dp_comm_s"}
    assert d["simulated"]["iteration_time_s"] > 0


def test_evaluate_overrides_change_the_answer(run_cli):
    cfg = "tp=8,pp=2,cp=2,placement=dp_out,dp_flavour=ddp,collective=ring,overlap_dp=0,recompute=full"
    a = run_cli("evaluate", "--model", "llama3-8b", "--cluster", "metro-2bldg", "--config", cfg, "--json")
    b = run_cli("evaluate", "--model", "llama3-8b", "--cluster", "metro-2bldg", "--config", cfg, "--json",
                "--set", "cluster.cross_building.distance_km=400")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert json.loads(b.stdout)["iteration_time_s"] > json.loads(a.stdout)["iteration_time_s"]


def test_infeasible_is_not_an_error(run_cli):
    r = run_cli("evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--config",
                "tp=8,cp=2,pp=1,dp_flavour=ddp", "--json")
    assert r.returncode == 0
    d = json.loads(r.stdout)
    assert d["feasible"] is False and d["memory_deficit_bytes"] > 0 and "short by" in d["reason"]


def test_space_json(run_cli):
    r = run_cli("space", "--model", "llama3-70b", "--cluster", "metro-2bldg", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert 0 < d["legal_count"] < d["raw_size"]


def test_validate_json_contract(run_cli):
    r = run_cli("validate", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) >= {"rows", "skipped", "n", "median_ape", "p90_ape"}
    assert set(d["rows"][0]) >= {"model_name", "measured_metric", "measured", "predicted", "ape"}
    assert all(set(s) >= {"row", "reason"} for s in d["skipped"])


def test_bench_json_contract(run_cli):
    r = run_cli("bench", "--rows", "20000", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("batch_configs_per_s", "scalar_eval_us", "space_size", "exhaustive_s"):
        assert d[key] > 0


BAD = [
    (["evaluate", "--model", "llama9", "--cluster", "campus-5bldg", "--config", "tp=8"], "model"),
    (["evaluate", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--config", "tp=8", "--set", "model.hidden=-1"], "model.hidden"),
    (["evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--config", "tp=16,pp=8"], "config.tp"),
    (["evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--config", "tp=8,pp=16,pp_schedule=zbv,pp_chunks=1"], "config.pp_chunks"),
    (["evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--config", "tp=8,pp=16,dp=7"], "config.dp"),
    (["evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--config", "tp=8,speed=fast"], "config.speed"),
    (["evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--config", "tp=eight"], "config.tp"),
    (["evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--config", "tp=8,placement=sideways"], "config.placement"),
    (["evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg"], "--config"),
    (["evaluate", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--gpus", "-8", "--config", "tp=8"], "gpus"),
    (["space", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--set", "cluster.cross_building.loss_rate=2"], "loss_rate"),
    (["space", "--scenario", "/nonexistent.yaml"], "--scenario"),
    (["validate", "--runs", "/nonexistent.csv"], "--runs"),
    (["frobnicate"], "frobnicate"),
]


@pytest.mark.parametrize("args, needle", BAD)
def test_bad_input_is_one_line_exit_2(run_cli, args, needle):
    r = run_cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert needle in err


def test_study_and_compare_through_the_cli(run_cli, tmp_path):
    storage, tracking = f"sqlite:///{tmp_path}/s.db", f"sqlite:///{tmp_path}/m.db"
    r = run_cli("study", "--model", "llama3-8b", "--cluster", "single-building", "--strategy", "tpe", "--trials", "15",
                "--storage", storage, "--tracking-uri", tracking, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["n_trials"] == 15 and d["mlflow_run_id"]
    assert d["best_iteration_time_s"] <= d["production_iteration_time_s"]
    r = run_cli("compare", "--model", "llama3-8b", "--cluster", "single-building", "--strategies", "tpe,random",
                "--budget", "12", "--seeds", "2", "--out", str(tmp_path / "cmp"), "--tracking-uri", tracking, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["strategies"]) == {"tpe", "random"}
    for s in d["strategies"].values():
        assert s["median_gap_pct"] >= -1e-9
    assert (tmp_path / "cmp").is_dir() and d["plot"].endswith(".png")


@pytest.mark.parametrize("args, needle", [
    (["study", "--model", "llama3-8b", "--cluster", "single-building", "--strategy", "annealing"], "--strategy"),
    (["study", "--model", "llama3-8b", "--cluster", "single-building", "--trials", "0"], "--trials"),
    (["compare", "--model", "llama3-8b", "--cluster", "single-building", "--budget", "0"], "--budget"),
    (["study", "--model", "llama3-8b", "--cluster", "single-building", "--storage", "postgresql+psycopg://u:sekret@127.0.0.1:9/x"], "--storage"),
    (["worker", "--study-name", "nope", "--storage", "sqlite:////tmp/definitely-missing-dir/x.db"], "--storage"),
])
def test_study_bad_input(run_cli, args, needle):
    r = run_cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and needle in err and "sekret" not in err
