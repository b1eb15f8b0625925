"""Third-party backends are found through the ``autotune.backends`` entry-point group."""
import sys

from autotune.backends import available_backends, get_backend


def test_entry_point_backend_is_discovered_and_used(tmp_path, monkeypatch):
    pkg = tmp_path / "toy_backend.py"
    pkg.write_text(
        "from autotune.backends import Measurement\n"
        "class ToyBackend:\n"
        "    name = 'toy'\n"
        "    def __init__(self, **kw):\n        pass\n"
        "    def measure(self, scenario, config):\n"
        "        return Measurement(iteration_time_s=1.0 + config.pp / 100.0)\n")
    dist = tmp_path / "toy_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[autotune.backends]\ntoy = toy_backend:ToyBackend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "toy" in available_backends()
    backend = get_backend("toy")
    from autotune.specs import build_scenario
    from autotune.study import run_study
    r = run_study(scenario=build_scenario("llama3-8b", "campus-5bldg"), strategy="random", trials=5,
                  storage=f"sqlite:///{tmp_path}/s.db", backend="toy", track=False)
    assert r["n_trials"] == 5 and 1.0 < r["best_iteration_time_s"] < 3.0
    assert backend.measure(None, type("C", (), {"pp": 4})()).iteration_time_s == 1.04
    sys.modules.pop("toy_backend", None)


def test_plugin_example_package(tmp_path):
    """experiments/plugin_example, pip-installed (into a folder), is found by entry point and
    drives a study through the CLI, options included."""
    import json
    import os
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(target), str(root / "experiments" / "plugin_example")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    env = dict(os.environ, PYTHONPATH=str(target) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, "-m", "autotune.cli", "study", "--model", "llama3-8b", "--cluster",
                        "campus-5bldg", "--strategy", "random", "--trials", "6", "--backend", "noisy",
                        "--backend-option", "noise=0.05", "--storage", f"sqlite:///{tmp_path}/s.db",
                        "--no-tracking", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["n_trials"] == 6 and d["best_iteration_time_s"] > 0
    bad = subprocess.run([sys.executable, "-m", "autotune.cli", "study", "--model", "llama3-8b", "--cluster",
                          "campus-5bldg", "--trials", "2", "--backend", "noisy", "--backend-option", "colour=red",
                          "--storage", f"sqlite:///{tmp_path}/t.db", "--no-tracking"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "--backend-option" in bad.stderr and "Traceback" not in bad.stderr
