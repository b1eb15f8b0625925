"""Issue 17's reliability figures, measured through the real command line:
- kills (SIGKILL) at 50 seeded random moments of a study, schema creation and start-up included:
  every resume works, and no finished trial is lost or counted twice, in Optuna or in MLflow;
- 10 pairs of commands started at once on fresh storage and tracking files: both succeed;
- 20 corruption patterns applied to a finished study's Optuna and MLflow files: the next command
  either resumes the same study intact or ends in one line naming the file (exit 2 or 3) within
  10 s; it never starts over silently."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from helpers import env_with_slow_backend
from mlflow.tracking import MlflowClient

from reliability_report import record

pytestmark = pytest.mark.slow
TRIALS = 8
KILLS = 50


def study_args(tmp: Path, name: str = "s", backend: str = "slow") -> list[str]:
    return [sys.executable, "-m", "autotune.cli", "study", "--model", "llama3-8b", "--cluster", "single-building",
            "--gpus", "64", "--strategy", "random", "--until", str(TRIALS), "--backend", backend,
            "--storage", f"sqlite:///{tmp}/s.db", "--tracking-uri", f"sqlite:///{tmp}/m.db", "--study-name", name,
            "--json"]


def logged_trials(tmp: Path, parent: str) -> list[int]:
    c = MlflowClient(f"sqlite:///{tmp}/m.db")
    exp = c.get_experiment_by_name("autotune")
    runs = c.search_runs([exp.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'",
                         max_results=10000)
    return sorted(int(r.data.tags["autotune.trial"]) for r in runs)


def finished(tmp: Path, name: str = "s") -> dict:
    """Finished trials (complete, or failed: out of memory or interrupted by a kill) by number."""
    st = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp}/s.db")
    return {t.number: (t.state.name, t.values) for t in st.trials if t.state.is_finished()}


def test_kills_at_random_moments_then_resume(tmp_path):
    rng = random.Random(17)
    env = env_with_slow_backend(tmp_path)
    problems = []
    for k in range(KILLS):
        run = tmp_path / f"k{k}"
        run.mkdir()
        delay = rng.uniform(0.2, 4.5)          # start-up (~1-2 s), schema creation, baselines, trials
        p = subprocess.Popen(study_args(run), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        before = finished(run) if (run / "s.db").exists() and _has_study(run) else {}
        r = subprocess.run(study_args(run), env=env, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            problems.append(f"kill {k} at {delay:.2f} s: resume exit {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        d = json.loads(r.stdout)
        after = finished(run)
        lost = [n for n, v in before.items() if after.get(n) != v]
        logged = logged_trials(run, d["mlflow_run_id"])
        # an interrupted trial is failed and does not use up the budget: at least TRIALS finished,
        # every finished trial logged once
        if d["n_trials"] < TRIALS or lost or logged != sorted(after):
            problems.append(f"kill {k} at {delay:.2f} s: n_trials {d['n_trials']}, lost {lost}, logged {logged}, "
                            f"finished {sorted(after)}")
    record("kills_then_resume", KILLS, failures=len(problems))
    assert not problems, "\n".join(problems)


def _has_study(run: Path) -> bool:
    try:
        optuna.load_study(study_name="s", storage=f"sqlite:///{run}/s.db")
        return True
    except Exception:  # noqa: BLE001 - killed before the study was created
        return False


def test_concurrent_pairs_on_fresh_files(tmp_path):
    """Five pairs of two studies, five pairs of the same study from two processes (as workers)."""
    problems = []
    for i in range(10):
        run = tmp_path / f"p{i}"
        run.mkdir()
        names = ("a", "b") if i < 5 else ("same", "same")
        ps = [subprocess.Popen(study_args(run, n, "costmodel"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for n in names]
        outs = [p.communicate(timeout=300) for p in ps]
        for p, (out, err) in zip(ps, outs):
            if p.returncode != 0:
                problems.append(f"pair {i}: exit {p.returncode}: {err.strip()[-300:]}")
        if not problems:
            for n in set(names):
                got = finished(run, n)
                if len(got) < TRIALS:
                    problems.append(f"pair {i}: study {n} has {len(got)} finished trials")
            for out, _ in outs:
                d = json.loads(out)
                logged = logged_trials(run, d["mlflow_run_id"])
                if len(logged) != len(set(logged)) or set(logged) != set(finished(run, d["study_name"])):
                    problems.append(f"pair {i}: logged {logged}, finished {sorted(finished(run, d['study_name']))}")
    record("concurrent_pairs", 10, failures=len(problems))
    assert not problems, "\n".join(problems)


def _truncate(n):
    return lambda b: b[:n]


def _garble(offset, length=4096):
    def f(b):
        off = offset if offset >= 0 else max(0, len(b) + offset)
        return b[:off] + bytes((x * 7 + 13) % 256 for x in range(length)) + b[off + length:]
    return f


CORRUPTIONS = {
    "empty": _truncate(0), "half": lambda b: b[:len(b) // 2], "first page": _truncate(4096),
    "header only": _truncate(100), "100 bytes short": lambda b: b[:-100],
    "garbled header": _garble(0, 100), "garbled page 2": _garble(4096), "garbled middle": lambda b: _garble(len(b) // 2)(b),
    "garbled last page": _garble(-4096), "garbled 16 bytes at 20": _garble(20, 16), "zeroed middle": lambda b: (
        b[:len(b) // 2] + bytes(4096) + b[len(b) // 2 + 4096:]),
    "zeroed start": lambda b: bytes(4096) + b[4096:], "text": lambda b: b"not a database\n" * 50,
    "random bytes": lambda b: random.Random(1).randbytes(len(b)), "doubled": lambda b: b + b,
    "appended garbage": lambda b: b + b"\x00garbage" * 512, "one bit flipped in header": lambda b: bytes([b[0] ^ 1]) + b[1:],
    "page size field": lambda b: b[:16] + b"\x00\x03" + b[18:], "swapped halves": lambda b: b[len(b) // 2:] + b[:len(b) // 2],
    "every 1000th byte": lambda b: bytes((x ^ 0xFF) if i % 1000 == 0 else x for i, x in enumerate(b)),
}


@pytest.mark.parametrize("which", ["s.db", "m.db"])
def test_corruption_patterns(tmp_path, which):
    assert len(CORRUPTIONS) == 20
    seed_dir = tmp_path / "seed"
    seed_dir.mkdir()
    r = subprocess.run(study_args(seed_dir, backend="costmodel"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    good = json.loads(r.stdout)
    problems = []
    for name, corrupt in CORRUPTIONS.items():
        run = tmp_path / name.replace(" ", "_")
        run.mkdir()
        for f in ("s.db", "m.db"):
            data = (seed_dir / f).read_bytes()
            (run / f).write_bytes(corrupt(data) if f == which else data)
        t0 = time.perf_counter()
        r = subprocess.run(study_args(run, backend="costmodel"), capture_output=True, text=True, timeout=120)
        elapsed = time.perf_counter() - t0
        err = r.stderr.strip()
        if r.returncode == 0:
            d = json.loads(r.stdout)
            if d["best_iteration_time_s"] != good["best_iteration_time_s"] or d["n_trials"] != TRIALS:
                problems.append(f"{which} {name}: exit 0 but not the same study ({d['n_trials']} trials)")
        elif r.returncode not in (2, 3) or len(err.splitlines()) != 1 or which not in err or "Traceback" in err:
            problems.append(f"{which} {name}: exit {r.returncode}: {err[-300:]}")
        if elapsed > 10 + 3:                                   # 10 s, plus the interpreter's start-up
            problems.append(f"{which} {name}: took {elapsed:.1f} s")
    record("corruption_patterns", len(CORRUPTIONS), failures=len(problems))
    assert not problems, "\n".join(problems)
