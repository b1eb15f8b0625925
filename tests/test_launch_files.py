"""``search --top K --out DIR``: a launchable result (issue 15)."""
from __future__ import annotations

import json

import yaml

SCEN = ["--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "64"]
FILES = {"best_config.yaml", "torchtitan_args.txt", "megatron_args.txt", "nccl.env", "top_k.csv",
         "scenario.yaml"}


def test_out_writes_launch_files_that_read_back(run_cli, tmp_path):
    out = tmp_path / "best"
    r = run_cli("search", *SCEN, "--top", "3", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert {p.name for p in out.iterdir()} == FILES
    assert len(d["top"]) == 3 and [t["rank"] for t in d["top"]] == [1, 2, 3]
    times = [t["iteration_time_s"] for t in d["top"]]
    assert times == sorted(times)
    best = yaml.safe_load((out / "best_config.yaml").read_text())
    assert best["iteration_time_s"] == d["best"]["iteration_time_s"]
    # the written configuration evaluates to the same time through --config FILE and --config TEXT
    for cfg in (str(out / "best_config.yaml"), best["config_text"]):
        e = run_cli("evaluate", *SCEN, "--config", cfg, "--json")
        assert e.returncode == 0, e.stderr
        assert json.loads(e.stdout)["iteration_time_s"] == best["iteration_time_s"]
    tt = (out / "torchtitan_args.txt").read_text()
    c = best["best_config"]
    assert f"--parallelism.tensor_parallel_degree={c['tp']} " in tt and f"--parallelism.pipeline_parallel_degree={c['pp']} " in tt
    assert tt.rstrip().endswith(f"activation-checkpoint:{c['recompute']}")
    assert f"--tensor-model-parallel-size {c['tp']}" in (out / "megatron_args.txt").read_text()
    assert "export NCCL_BUFFSIZE=" in (out / "nccl.env").read_text()
    assert len((out / "top_k.csv").read_text().strip().splitlines()) == 1 + 3
    assert yaml.safe_load((out / "scenario.yaml").read_text())["cluster"]["name"] == "metro-2bldg"


def test_out_that_is_a_file_exits_2_and_writes_nothing(run_cli, tmp_path):
    f = tmp_path / "taken"
    f.write_text("keep")
    r = run_cli("search", *SCEN, "--out", str(f))
    assert r.returncode == 2 and "--out" in r.stderr and "Traceback" not in r.stderr
    assert f.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    r = run_cli("search", *SCEN, "--out", str(f / "sub"))
    assert r.returncode == 2 and "--out" in r.stderr and len(r.stderr.strip().splitlines()) == 1


NOTHING_FITS = ["--model", "llama3-405b", "--cluster", "campus-5bldg", "--gpus", "10"]


def test_nothing_fits_leaves_no_empty_out_folder_and_search_exits_4(run_cli, tmp_path):
    """405B on 10 GPUs fits no configuration. search reports it, says on one stderr line that no
    launch files were written and exits 4 (no result: not 0, not a mistake's 2, not a crash's 1);
    it removes the --out folders it created, parents included, and keeps one that was there. A
    study's run with no feasible trial yet is not a failure (exit 0), but leaves no empty folder."""
    made = tmp_path / "new" / "made"
    r = run_cli("search", *NOTHING_FITS, "--out", str(made))
    assert r.returncode == 4, r.stderr
    assert "no configuration fits in memory" in r.stdout
    assert r.stderr.strip().count("\n") == 0 and "nothing written to --out" in r.stderr
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    r = run_cli("search", *NOTHING_FITS, "--out", str(kept), "--json")
    assert r.returncode == 4 and json.loads(r.stdout)["best"] is None and kept.is_dir()
    r = run_cli("study", *NOTHING_FITS, "--trials", "2", "--no-tracking", "--storage",
                f"sqlite:///{tmp_path / 's.db'}", "--out", str(made))
    assert r.returncode == 0, r.stderr
    assert "no feasible trial in this study yet (2 trials)" in r.stderr and not (tmp_path / "new").exists()


def test_top_out_of_range_exits_2(run_cli):
    for k in ("0", "-3", "100000"):
        r = run_cli("search", *SCEN, "--top", k)
        assert r.returncode == 2 and "--top" in r.stderr and "Traceback" not in r.stderr


def test_version_and_python_m(run_cli):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "autotune", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("autotune, version ")
    h = run_cli("search", "--help")
    assert "[default: 1]" in h.stdout      # --top shows its default


def test_torchtitan_batch_and_hsdp_degrees():
    """torchtitan accumulates local batches up to the global one; under PP the local batch is cut
    into micro-batches. HSDP replicates over the buildings its DP group spans, whatever the
    placement that spans them."""
    from autotune.backends.torchtitan import torchtitan_args
    from autotune.specs import Config, build_scenario
    s = build_scenario("llama3-8b", "metro-2bldg", gpus=64)
    a = torchtitan_args(s, Config(tp=2, pp=1, dp=32, micro_batch=2))
    assert "--training.local_batch_size=2" in a and f"--training.global_batch_size={s.global_batch_seqs}" in a
    a = torchtitan_args(s, Config(tp=2, pp=4, dp=8, micro_batch=2, pp_schedule="1f1b"))
    assert f"--training.local_batch_size={s.global_batch_seqs // 8}" in a
    assert "--parallelism.pipeline_parallel_microbatch_size=2" in a
    m = build_scenario("mixtral-8x7b", "metro-2bldg", gpus=512)
    a = torchtitan_args(m, Config(tp=8, ep=8, dp=64, placement="ep_out", dp_flavour="hsdp"))
    assert "--parallelism.data_parallel_replicate_degree=2" in a and "--parallelism.data_parallel_shard_degree=32" in a
