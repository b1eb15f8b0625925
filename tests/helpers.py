"""Scenario builders shared by tests."""
from autotune.specs import Scenario


def idealised(scen: Scenario) -> Scenario:
    """Same scenario with a network that costs nothing: huge bandwidth, zero latency and loss."""
    from autotune.costmodel.bounds import free_network
    return free_network(scen)


def with_tier(scen: Scenario, tier: str, **update) -> Scenario:
    c = scen.cluster
    t = getattr(c, tier).model_copy(update=update)
    return scen.model_copy(update={"cluster": c.model_copy(update={tier: t})})


SLOW_BACKEND = (
    "import time\n"
    "from autotune.backends import CostModelBackend\n"
    "class Slow(CostModelBackend):\n"
    "    name = 'slow'\n"
    "    def measure(self, scenario, config):\n"
    "        time.sleep(0.2)\n"
    "        return super().measure(scenario, config)\n")


def env_with_slow_backend(tmp_path) -> dict:
    """Environment for a subprocess in which the entry point ``slow`` (the cost model plus
    0.2 s per trial) is installed, as a dist-info folder on PYTHONPATH."""
    import os
    (tmp_path / "slow_backend.py").write_text(SLOW_BACKEND)
    d = tmp_path / "slow_backend-0.1.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: slow-backend\nVersion: 0.1\n")
    (d / "entry_points.txt").write_text("[autotune.backends]\nslow = slow_backend:Slow\n")
    return dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                PYTHONWARNINGS="ignore")
