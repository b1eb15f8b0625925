"""Issue 15: the core installs alone; a command that needs an extra says which one, in one line,
before any work."""
import json
import subprocess
import sys

import numpy as np
import pytest

BLOCK = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Block())
import importlib.util
_find = importlib.util.find_spec
def find_spec(name, package=None):
    if name.split('.')[0] in {blocked!r}:
        return None
    return _find(name, package)
importlib.util.find_spec = find_spec
sys.argv = ['autotune'] + {args!r}
from autotune.cli import main
sys.exit(main())
"""


def run_without(blocked, *args, cwd=None):
    """The CLI in a fresh interpreter in which the ``blocked`` top-level modules are not installed."""
    code = BLOCK.format(blocked=set(blocked), args=list(args))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd)


CORE_ONLY = ("mlflow", "scipy", "torch", "gymnasium", "stable_baselines3", "sb3_contrib", "psycopg")


def test_search_runs_on_the_core_alone():
    r = run_without(CORE_ONLY, "search", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["best"]["feasible"]


def test_validate_scores_on_the_core_alone():
    r = run_without(CORE_ONLY, "validate", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["n"] > 100 and d["rank_correlation"]


@pytest.mark.parametrize("args, option, extra", [
    (("study", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--trials", "3"), "--tracking-uri", "tracking"),
    (("study", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--trials", "3", "--no-tracking",
      "--strategy", "ppo"), "--strategy", "rl"),
    (("study", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--trials", "3", "--no-tracking",
      "--strategy", "gp"), "--strategy", "gp"),
    (("study", "--model", "llama-mini", "--cluster", "local-2bldg", "--trials", "3", "--no-tracking",
      "--backend", "local-torch"), "--backend", "workloads"),
    (("validate", "--fit"), "--fit", "fit"),
    (("study", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--trials", "3", "--no-tracking",
      "--storage", "postgresql://u:secret@127.0.0.1:1/db"), "--storage", "postgres"),
])
def test_a_missing_extra_is_one_line_before_any_work(tmp_path, args, option, extra):
    r = run_without(CORE_ONLY, *args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith(f"autotune: error: {option}:") and f"autotune[{extra}]" in err
    assert "secret" not in err
    assert list(tmp_path.iterdir()) == []          # nothing written


def test_average_ranks_match_scipy():
    from scipy.stats import rankdata

    from autotune.validation.rank import average_ranks
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = rng.integers(0, 5, size=rng.integers(1, 12)).astype(float)
        np.testing.assert_allclose(average_ranks(x), rankdata(x))


def test_a_tpe_study_runs_on_the_core_alone(tmp_path):
    r = run_without(CORE_ONLY, "study", "--model", "llama3-8b", "--cluster", "campus-5bldg", "--trials", "25",
                    "--no-tracking", "--storage", f"sqlite:///{tmp_path}/s.db", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["n_trials"] == 25


@pytest.mark.slow
def test_core_install_in_a_fresh_venv(tmp_path):
    """pip install of the package alone (the core) into a fresh venv: none of the extras' packages
    come with it, and the README's search runs from it."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    venv = tmp_path / "core"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(root)], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "pip"), "list", "--format=json"], capture_output=True, text=True)
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert not names & {"mlflow", "scipy", "torch", "gymnasium", "stable-baselines3", "sb3-contrib", "psycopg"}
    s = subprocess.run([str(venv / "bin" / "autotune"), "search", "--model", "llama3-405b", "--cluster",
                        "campus-5bldg", "--json"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert s.returncode == 0, s.stderr[-2000:]
    assert json.loads(s.stdout)["best"]["feasible"]
