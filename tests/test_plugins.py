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
