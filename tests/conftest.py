import os
import subprocess
import sys

import pytest

from autotune.specs import build_scenario


@pytest.fixture(scope="session")
def campus():
    return build_scenario("llama3-405b", "campus-5bldg")


@pytest.fixture(scope="session")
def run_cli():
    """Run the real console entry point in a subprocess; returns CompletedProcess."""
    def run(*args, timeout=300, cwd=None):
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True,
                              text=True, timeout=timeout, env=env, cwd=cwd)
    return run
