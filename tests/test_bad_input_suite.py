"""Issue 17: the generated bad-input suite (tests/badinputs.py, over 2,000 seeded cases across
command lines, --set, scenario and configuration files, URIs, paths and backend options). Each case
must end in one line on stderr under 500 characters, exit 2 (3 for a storage file that is not a
healthy database), no traceback, within 10 s, with nothing written to its working folder and its
input files unchanged. The whole suite runs in the default test run (about 15 s)."""
from __future__ import annotations

import io
import os
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import badinputs
from reliability_report import record

SLOW_CASE_S = 10.0
"""A case that takes longer is a hang (the issue's bound), not a slow machine: the slowest normal
case (an unreachable database URL) answers in about a second."""


def run_case(case: badinputs.Case, root: Path) -> list[str]:
    """Run one case in its own folders; the list of what went wrong (empty: it passed)."""
    inp, work = root / "in", root / "work"
    inp.mkdir()
    work.mkdir()
    for name, data in case.files:
        (inp / name).write_bytes(data)
    before = {p.name: p.read_bytes() for p in inp.iterdir() if p.is_file()}
    argv = [a.replace("{in}", str(inp)).replace("{work}", str(work)) for a in case.argv]
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(work)
    t0 = time.perf_counter()
    problems = []
    try:
        from autotune.cli import main
        with redirect_stdout(out), redirect_stderr(err):
            code = main(argv)
    except BaseException as e:  # noqa: BLE001 - an escaped exception is the failure being looked for
        code = None
        problems.append(f"escaped {type(e).__name__}: {str(e)[:200]}")
    finally:
        os.chdir(cwd)
    elapsed = time.perf_counter() - t0
    text = err.getvalue().strip()
    lines = text.splitlines()
    if code is not None and code not in case.codes:
        problems.append(f"exit {code}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr")
    if "Traceback" in text:
        problems.append("traceback")
    if len(text) >= 500:
        problems.append(f"error line of {len(text)} characters")
    if elapsed > SLOW_CASE_S:
        problems.append(f"took {elapsed:.1f} s")
    written = sorted(p.name for p in work.iterdir())
    if written:
        problems.append(f"wrote {written}")
    after = {p.name: p.read_bytes() for p in inp.iterdir() if p.is_file()}
    if after != before:
        problems.append("changed its input files")
    return [f"{p} [{case.kind}: {' '.join(case.argv)[:160]!r} -> {text[:200]!r}]" for p in problems]


def _run_all(cases, tmp_path):
    failures = []
    for i, case in enumerate(cases):
        root = tmp_path / f"c{i}"
        root.mkdir()
        failures += run_case(case, root)
    return failures


def test_every_generated_bad_input(tmp_path):
    """All of them (about 15 s): the default run is the whole suite."""
    cases = badinputs.cases()
    assert len(cases) >= 2000
    failures = _run_all(cases, tmp_path)
    record("generated_bad_inputs", len(cases), failures=len(failures))
    assert not failures, f"{len(failures)} of {len(cases)}:\n" + "\n".join(failures[:40])
