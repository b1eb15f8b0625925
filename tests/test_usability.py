"""Issue 15: overrides that merge deeply, the effective scenario shown, launch folders from study and
compare, pasteable configurations."""
import json
from pathlib import Path

import pytest
import yaml

from autotune.errors import UserInputError
from autotune.specs.presets import build_scenario, deep_merge


def test_deep_merge_keeps_what_is_not_overridden():
    base = {"a": {"b": 1, "c": {"d": 2, "e": 3}}, "l": [1, 2]}
    out = deep_merge(base, {"a": {"c": {"d": 9}}, "l": [7]})
    assert out == {"a": {"b": 1, "c": {"d": 9, "e": 3}}, "l": [7]}
    assert base["a"]["c"]["d"] == 2          # the base is not changed


def test_scenario_file_on_a_preset_merges_into_its_tiers(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster:\n  preset: campus-5bldg\n  cross_building: {loss_rate: 1.0e-5}\n")
    scen = build_scenario(scenario_file=str(f))
    ref = build_scenario("llama3-8b", "campus-5bldg")
    assert scen.cluster.cross_building.loss_rate == 1e-5
    assert scen.cluster.cross_building.bandwidth_Bps == ref.cluster.cross_building.bandwidth_Bps
    assert scen.cluster.cross_building.distance_km == ref.cluster.cross_building.distance_km


def test_set_with_a_mapping_merges():
    scen = build_scenario("llama3-8b", "metro-2bldg", overrides=["cluster.cross_building={distance_km: 400}"])
    ref = build_scenario("llama3-8b", "metro-2bldg")
    assert scen.cluster.cross_building.distance_km == 400
    assert scen.cluster.cross_building.oversubscription == ref.cluster.cross_building.oversubscription


def test_set_into_a_tier_the_preset_lacks_names_the_tiers_it_has():
    with pytest.raises(UserInputError) as e:
        build_scenario("llama3-8b", "region-pair", overrides=["cluster.cross_building.loss_rate=1e-5"])
    msg = str(e.value)
    assert "cluster.cross_building" in msg and "cross_region" in msg and "Field required" not in msg
    ok = build_scenario("llama3-8b", "region-pair", overrides=["cluster.cross_region.loss_rate=1e-4"])
    assert ok.cluster.cross_region.loss_rate == 1e-4


def test_header_shows_the_effective_network(run_cli):
    r = run_cli("space", "--model", "llama3-8b", "--cluster", "region-pair", "--set",
                "cluster.cross_region.distance_km=1000", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["effective_scenario"]["cluster"]["cross_region"]["distance_km"] == 1000
    assert any(line.startswith("cross_region:") and "1000 km" in line for line in d["network"])
    h = run_cli("space", "--model", "llama3-8b", "--cluster", "region-pair")
    assert "cross_region: 50 GB/s per GPU, 1:8" in h.stdout


def test_study_out_writes_a_launch_folder_and_pasteable_best(run_cli, tmp_path):
    out = tmp_path / "launch"
    r = run_cli("study", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--trials", "8", "--no-tracking",
                "--storage", f"sqlite:///{tmp_path}/s.db", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    best_line = next(line for line in r.stdout.splitlines() if line.startswith("best: "))
    assert best_line.startswith("best: tp=") and "{" not in best_line
    best = yaml.safe_load((out / "best_config.yaml").read_text())
    assert best["measured_by"] == "costmodel"
    assert best["measured_iteration_time_s"] == pytest.approx(best["iteration_time_s"])
    rows = (out / "top_k.csv").read_text().splitlines()
    assert rows[0].startswith("rank,config,measured_s,") and len(rows) >= 2
    assert yaml.safe_load((out / "scenario.yaml").read_text())["model"]["name"] == "llama3-8b"


def test_two_compares_with_other_overrides_keep_their_own_folders(run_cli, tmp_path):
    outs = []
    for dist in ("3", "300"):
        r = run_cli("compare", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--strategies", "random",
                    "--budget", "5", "--seeds", "1", "--out", str(tmp_path / "cmp"), "--no-tracking", "--json",
                    "--set", f"cluster.cross_building.distance_km={dist}", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout))
    assert Path(outs[0]["table"]).parent != Path(outs[1]["table"]).parent
    for d in outs:
        folder = Path(d["table"]).parent
        assert (folder / "best_config.yaml").exists() and (folder / "nccl.env").exists()
        assert Path(d["table"]).exists() and Path(d["plot"]).exists()


def test_show_lists_presets_and_prints_a_cluster_with_its_tiers(run_cli):
    r = run_cli("show", "--json")
    assert r.returncode == 0 and "campus-5bldg" in json.loads(r.stdout)["clusters"]
    c = run_cli("show", "region-pair", "--json")
    d = json.loads(c.stdout)
    assert d["kind"] == "cluster" and d["derived"]["n_gpus"] == 8192
    assert any(line.startswith("cross_region:") for line in d["derived"]["network"])
    m = json.loads(run_cli("show", "llama4-maverick", "--json").stdout)
    assert m["derived"]["is_moe"] and m["derived"]["active_params"] < m["derived"]["total_params"]


def test_show_unknown_preset_is_one_line(run_cli):
    r = run_cli("show", "llama5-9000")
    assert r.returncode == 2 and r.stdout == ""
    err = r.stderr.strip()
    assert "\n" not in err and "llama5-9000" in err and "llama3-405b" in err and "campus-5bldg" in err


def test_space_knobs_lists_legal_values_with_their_rules(run_cli):
    r = run_cli("space", "--model", "llama3-8b", "--cluster", "single-building", "--knobs", "--json")
    d = json.loads(r.stdout)["knobs"]
    assert d["tp"]["values"] == [1, 2, 4, 8] and "NVLink" in d["tp"]["rule"]
    assert d["ep"]["values"] == [1]                                   # dense model
    assert d["xb_load_balancing"]["values"] == ["ecmp"]               # one building: the transport knobs do nothing
    assert "pp_out" not in d["placement"]["values"]


def test_environment_registers_from_the_library_namespace():
    """In a fresh interpreter, ``import autotune`` alone makes the environment available to
    gymnasium.make; the top-level envs/agents folders are shims that are not installed."""
    import subprocess
    import sys
    for first in ("import autotune, sys; assert 'gymnasium' not in sys.modules; import gymnasium",
                  "import gymnasium, autotune"):       # import autotune alone does not load gymnasium
        # one design point: registration is what is checked (each point costs a baseline search)
        code = first + ("; env = gymnasium.make('autotune/ScaleAcross-v0', n_points=1).unwrapped; "
                        "print(type(env).__module__)")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "autotune.envs.scale_across"
    import tomllib
    meta = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert meta["tool"]["setuptools"]["packages"]["find"]["include"] == ["autotune*"]


def test_shims_are_the_same_modules():
    import agents.ppo
    import envs.scale_across

    import autotune.agents.ppo
    import autotune.envs.scale_across
    assert envs.scale_across is autotune.envs.scale_across
    assert agents.ppo is autotune.agents.ppo


def test_missing_policy_names_a_command_that_exists():
    from autotune.agents.ppo import load
    with pytest.raises(UserInputError) as e:
        load(Path("/nonexistent/policy.zip"))
    assert "python -m autotune.agents.ppo" in str(e.value)


def test_training_writes_under_the_working_directory_by_default():
    from autotune.agents.ppo import DEFAULT_POLICY, TRAIN_OUT
    assert not TRAIN_OUT.is_absolute() and TRAIN_OUT.resolve() != DEFAULT_POLICY.resolve()


def test_study_says_what_it_does_before_the_first_trial(capsys, tmp_path):
    from autotune.study import StudyRunner
    scen = build_scenario("llama3-8b", "campus-5bldg")
    StudyRunner(scen, strategy="random", trials=3, storage=f"sqlite:///{tmp_path}/s.db", track=False,
                progress=True).run()
    err = capsys.readouterr().err
    for phase in ("opening the study", "measuring the baselines", "starting random"):
        assert phase in err
    assert "TPE's start-up" not in err


def test_tpe_says_it_ranks_the_model_before_its_first_trial(capsys, tmp_path):
    """The model start-up ranks the space before the first trial (seconds on large spaces): a
    phase line says so instead of a silent wait."""
    from autotune.study import StudyRunner
    scen = build_scenario("llama3-8b", "campus-5bldg")
    StudyRunner(scen, strategy="tpe", trials=2, storage=f"sqlite:///{tmp_path}/s.db", track=False,
                progress=True, strategy_options={"startup": "model"}).run()
    assert "TPE's start-up: ranking the model's fastest of" in capsys.readouterr().err


def test_evaluate_simulate_announces_the_simulation(run_cli):
    r = run_cli("evaluate", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--config",
                "tp=8,pp=2,placement=dp_out,dp_flavour=zero1,pp_schedule=1f1b", "--global-batch", "2560", "--simulate")
    assert r.returncode == 0, r.stderr
    assert "simulating every micro-batch" in r.stderr and "simulated iteration" in r.stdout


def _slow_params(tmp_path):
    """A parameter file that halves the GEMM ceiling and doubles the host time of a layer: every
    compute-bound and every launch-bound time grows (llama3-8b's production recipe on 10,240 GPUs,
    tp 8 and cp 2 at one micro-batch a step, waits on its host)."""
    from autotune.costmodel import default_params
    d = default_params()
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"params": {"gemm_efficiency_max": d.gemm_efficiency_max / 2,
                                            "framework_efficiency_megatron": d.framework_efficiency_megatron,
                                            "host_layer_fwd_us": 2 * d.host_layer_fwd_us}}))
    return p


def test_study_and_compare_take_a_parameter_file(run_cli, tmp_path):
    p = _slow_params(tmp_path)
    runs = {}
    for tag, extra in (("shipped", []), ("file", ["--params", str(p)])):
        r = run_cli("study", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--strategy", "production",
                    "--trials", "1", "--no-tracking", "--storage", f"sqlite:///{tmp_path}/{tag}.db", "--json",
                    *extra, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        runs[tag] = json.loads(r.stdout)["best_iteration_time_s"]
    assert runs["file"] > 1.05 * runs["shipped"]
    c = run_cli("compare", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--strategies", "random",
                "--budget", "3", "--seeds", "1", "--out", str(tmp_path / "cmp"), "--no-tracking", "--json",
                "--params", str(p), cwd=tmp_path)
    assert c.returncode == 0, c.stderr
    d = json.loads(c.stdout)
    assert d["optimum_s"] > 1.05 * json.loads(run_cli("search", "--model", "llama3-8b", "--cluster", "campus-5bldg",
                                                     "--json").stdout)["best"]["iteration_time_s"]


def test_a_bad_parameter_file_writes_nothing(run_cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("params: {no_such_knob: 1}\n")
    for cmd in (("study", "--trials", "2", "--no-tracking", "--storage", f"sqlite:///{tmp_path}/s.db"),
                ("compare", "--budget", "2", "--seeds", "1", "--out", str(tmp_path / "cmp"), "--no-tracking")):
        r = run_cli(cmd[0], "--model", "llama3-8b", "--cluster", "campus-5bldg", *cmd[1:], "--params", str(bad),
                    cwd=tmp_path)
        assert r.returncode == 2 and "no_such_knob" in r.stderr and "\n" not in r.stderr.strip()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bad.yaml"]


def test_a_reader_that_leaves_early_gets_the_shell_code_and_no_noise():
    """`autotune validate | head -1`: click meets EPIPE on stdout; the command exits 141 (128 +
    SIGPIPE, as a shell reports a writer the pipe killed) with nothing on stderr, not 1."""
    import subprocess
    import sys
    exe = str(Path(sys.executable).with_name("autotune"))
    p = subprocess.Popen([exe, "validate"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141 and err == b""
