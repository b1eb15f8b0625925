"""Mistakes a reviewer found that ended in a traceback, a silently wrong figure or a partly
written folder (twenty-fourth session); the one-line answers themselves are in the seeded
bad-input suite (tests/badinputs.py MISUSE). Here: what happens around them."""
from __future__ import annotations

import json
import zipfile

import pytest

from autotune.backends.command import CommandBackend
from autotune.specs import build_scenario

MINI = ["--model", "llama-mini", "--cluster", "local-2bldg"]


def test_a_launch_file_name_taken_by_a_folder_is_refused_before_any_file_is_written(run_cli, tmp_path):
    out = tmp_path / "so"
    (out / "top_k.csv").mkdir(parents=True)
    r = run_cli("search", *MINI, "--out", str(out))
    assert r.returncode == 2 and "top_k.csv" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["top_k.csv"]        # nothing else written


@pytest.mark.parametrize("damage", ["truncated", "edited"])
def test_a_damaged_optimum_cache_is_computed_again_with_a_note(run_cli, tmp_path, damage):
    args = ["compare", *MINI, "--strategies", "random", "--budget", "3", "--seeds", "1", "--no-tracking",
            "--out", str(tmp_path), "--json"]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    cache = next(tmp_path.glob("optimum-*.json"))
    good = json.loads(cache.read_text())
    cache.write_text(cache.read_text()[:15] if damage == "truncated" else '{"optimum_s": "fast"}')
    again = run_cli(*args)
    assert again.returncode == 0 and "computing the optimum again" in again.stderr, again.stderr
    assert json.loads(cache.read_text())["optimum_s"] == good["optimum_s"]


def test_a_zip_without_a_policy_is_one_line(run_cli, tmp_path):
    z = tmp_path / "empty.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("a.txt", "hello")
    r = run_cli("propose", *MINI, "--policy", str(z))
    assert r.returncode == 2 and "--policy" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("line, words", [('{"iteration_time_s": true}', "non-numeric step time"),
                                         ('{"iteration_time_s": 2.0, "feasible": "false"}', "not JSON true or false")])
def test_command_results_that_are_not_what_they_look_like_fail_the_trial(tmp_path, line, words):
    script = tmp_path / "r.sh"
    script.write_text(f"#!/bin/sh\necho '{line}'\n")
    script.chmod(0o755)
    scen = build_scenario(model="llama-mini", cluster="local-2bldg")
    from autotune.configparse import make_config
    cfg = make_config({"tp": 1, "pp": 1}, scen.n_gpus)
    m = CommandBackend(template=str(script)).measure(scen, cfg)
    assert m.failed and words in m.reason


def test_failed_trials_are_not_counted_out_of_memory(run_cli, tmp_path):
    r = run_cli("study", *MINI, "--backend", "command", "--backend-option", "template=false", "--trials", "2",
                "--no-tracking", "--storage", f"sqlite:///{tmp_path}/s.db", "--json")
    d = json.loads(r.stdout)
    assert d["n_failed"] == 2 and d["n_infeasible"] == 0
