"""The README's reliability table: runs the reliability tests (fuzzing, SIGKILL and resume,
concurrent workers, faulty backends, storage and tracking outages, secrets) and prints what
they tried and survived.

    python experiments/reliability_table.py            # ~6 min on 2 cores (PostgreSQL and MLflow servers started by the tests)

Every number comes from the tests' own counters (tests/reliability_report.py); a failing test
fails this command.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/test_fuzz_input.py", "tests/test_bad_input_suite.py", "tests/test_crash_resume.py",
         "tests/test_kills_and_corruption.py", "tests/test_reliability.py"]


def main() -> int:
    report = Path(tempfile.mkdtemp()) / "reliability.json"
    env = dict(os.environ, AUTOTUNE_RELIABILITY_REPORT=str(report))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "slow or not slow", "-p", "no:warnings", *TESTS],
                       cwd=ROOT, env=env)
    data = json.loads(report.read_text()) if report.exists() else {}
    rows = []
    fuzz = {k.split(":", 1)[1]: v["count"] for k, v in data.items() if k.startswith("fuzz:")}
    rows.append(("Bad input fuzzed (hypothesis): one-line error, exit 2, nothing stored",
                 f"{sum(fuzz.values())} cases ({', '.join(f'{k} {v}' for k, v in sorted(fuzz.items()))})"))
    gen = data.get("generated_bad_inputs", {})
    rows.append(("Generated bad inputs (tests/badinputs.py: command lines, --set, scenario and configuration files, "
                 "URIs, paths, backend options): one line under 500 characters, exit 2 (3: storage file not a healthy "
                 "database), no traceback, under 10 s, nothing written",
                 f"{gen.get('count', 0)} cases, {gen.get('failures', 'n/a')} failures"))
    for key, text in (("kills_then_resume", "SIGKILL at seeded random moments (start-up, MLflow schema creation, "
                                            "baselines, trials), then resume: no finished trial lost or logged twice"),
                      ("concurrent_pairs", "Two commands at once on fresh storage and tracking files (5 pairs of two "
                                           "studies, 5 of one study from two processes)"),
                      ("corruption_patterns", "Corruption patterns on a finished study's Optuna and MLflow files (each): "
                                              "resumes intact or one line naming the file, exit 2/3, within 10 s")):
        e = data.get(key, {})
        rows.append((text, f"{e.get('count', 0)} tried, {e.get('failures', 'n/a')} failures"))
    kills = data.get("kills:sigkill_mid_trial", {})
    rows.append(("SIGKILL mid-trial, then resume by name: finished trials kept once (Optuna + MLflow)",
                 f"{kills.get('count', 0)} kills survived, {kills.get('trials_kept', 0)} trials finished before the last kill kept"))
    for kind in ("postgresql", "sqlite"):
        c = data.get(f"concurrent:{kind}", {})
        rows.append((f"Concurrent workers on {kind}: trials lost or duplicated",
                     f"{c.get('workers', 0)} workers x {c.get('trials', 0)} trials, "
                     f"{c.get('lost_or_duplicated', 'n/a')} lost/duplicated"))
    faults = {k.split(":", 2)[2]: v["count"] for k, v in data.items() if k.startswith("fault:backend:")}
    rows.append(("Faulty backend trials failed with their reason (study finished)",
                 ", ".join(f"{k} {v}" for k, v in sorted(faults.items())) or "none"))
    for key, text in (("fault:storage_outage", "PostgreSQL stopped mid-study: exit 3 after bounded retries, resume loses nothing"),
                      ("fault:tracking_outage", "MLflow server killed mid-study: exit 3, resume logs every trial once")):
        rows.append((text, f"{data.get(key, {}).get('count', 0)} outage(s) survived"))
    rows.append(("Secrets: passwords in storage/tracking URIs never shown (stdout, stderr, MLflow params/tags)",
                 f"{data.get('secrets:surfaces_checked', {}).get('count', 0)} outputs checked"))
    print("\n| what was tried | result |\n|---|---|")
    for a, b in rows:
        print(f"| {a} | {b} |")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
