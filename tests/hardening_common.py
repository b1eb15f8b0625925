"""Helpers of the hardening tests (issue 17): the CLI run in-process, the one-line error check,
process liveness, and the small scenario every file uses."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from contextlib import redirect_stderr, redirect_stdout

import pytest

from autotune.cli import main
from autotune.specs import build_scenario

SCEN = ["--model", "llama3-8b", "--cluster", "metro-2bldg"]
SMALL = [*SCEN, "--gpus", "8"]          # a small space: a whole study in ~0.1 s, for loops over URI forms
JSON_LINE = "echo '{{\"iteration_time_s\": 1.5}}'"      # a template's result line (braces doubled)


def run(argv: list[str]) -> tuple[int, str, str]:
    """The real CLI in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(code: int, err: str, *needles: str, exit_code: int = 2):
    assert code == exit_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("autotune: error: ") and "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def pids_in(path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def wait_dead(pids, within_s: float = 3.0) -> list[int]:
    """The pids still alive after ``within_s`` seconds (killed here so nothing leaks)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end and any(map(alive, pids)):
        time.sleep(0.05)
    left = [p for p in pids if alive(p)]
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    return left


@pytest.fixture
def scen():
    return build_scenario("llama3-8b", "metro-2bldg")


