"""Hardening (issue 17, items 8 and 9): commands that outlive their trial or flood memory, and bad
backend options."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc

import pytest

from autotune.specs import Config

from hardening_common import JSON_LINE, SCEN, assert_one_line_error, pids_in, run, scen, wait_dead  # noqa: F401 - scen is a fixture


# =============================================================== 8. runaway commands
def test_timeout_kills_the_whole_process_group(scen, tmp_path):
    from autotune.backends.command import CommandBackend
    pids = tmp_path / "pids"
    b = CommandBackend(template=f"sleep 60 & echo $! >> {pids}; trap '' TERM; sleep 60 & echo $! >> {pids}; wait",
                       timeout_s=0.5, kill_grace_s=0.2)
    t0 = time.monotonic()
    m = b.measure(scen, Config())
    assert m.failed and "timed out" in m.reason and time.monotonic() - t0 < 3
    assert len(pids_in(pids)) == 2 and not wait_dead(pids_in(pids), 1.0)


def test_background_child_holding_stdout_does_not_hold_the_trial(scen, tmp_path):
    from autotune.backends.command import CommandBackend
    pids = tmp_path / "pids"
    b = CommandBackend(template=f"sleep 60 & echo $! >> {pids}; {JSON_LINE}", timeout_s=20)
    t0 = time.monotonic()
    m = b.measure(scen, Config())
    assert not m.failed and m.iteration_time_s == 1.5 and time.monotonic() - t0 < 5
    assert not wait_dead(pids_in(pids), 1.0)


def test_output_is_read_with_a_cap_keeping_the_tail_and_the_json_line(scen):
    """150 MB of output (a 100 MB line with no newline, then 50 MB of short lines) around the
    result line: the backend holds a bounded tail, finds the line, and reports stderr's last line."""
    from autotune.backends.command import CommandBackend
    b = CommandBackend(template="echo '{{\"iteration_time_s\": 2.5, \"note\": \"ok\"}}'; "
                                "head -c 100000000 /dev/zero | tr '\\0' x; echo; "
                                "yes abcdefgh | head -c 50000000; echo last words >&2; exit 3", timeout_s=60)
    tracemalloc.start()
    try:
        m = b.measure(scen, Config())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert m.failed and "exit code 3" in m.reason and "last words" in m.reason
    assert peak < 32 * 2**20, peak
    ok = CommandBackend(template="head -c 50000000 /dev/zero | tr '\\0' y; echo; "
                                 "echo '{{\"iteration_time_s\": 2.5, \"note\": \"ok\"}}'; yes abc | head -c 1000000")
    m = ok.measure(scen, Config())
    assert not m.failed and m.iteration_time_s == 2.5 and m.extra["note"] == "ok"


def _cli_env():
    return dict(os.environ, PYTHONWARNINGS="ignore")


def test_commands_do_not_outlive_a_study_that_gave_up_on_them(tmp_path):
    """--trial-timeout abandons a measurement; the study finishes and exits: nothing it started
    may still run."""
    pids = tmp_path / "pids"
    r = subprocess.run([sys.executable, "-m", "autotune.cli", "study", *SCEN, "--strategy", "random", "--trials", "1",
                        "--backend", "command", "--backend-option", f"template=sleep 60 & echo $! >> {pids}; wait",
                        "--trial-timeout", "0.5", "--storage", f"sqlite:///{tmp_path}/s.db", "--no-tracking", "--json"],
                       capture_output=True, text=True, timeout=120, env=_cli_env())
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["failures_by_kind"].get("timeout", 0) >= 1
    assert pids_in(pids) and not wait_dead(pids_in(pids), 3.0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_commands_do_not_outlive_a_study_that_is_signalled(sig, tmp_path):
    pids = tmp_path / "pids"
    proc = subprocess.Popen([sys.executable, "-m", "autotune.cli", "study", *SCEN, "--strategy", "random",
                             "--trials", "3", "--backend", "command", "--backend-option",
                             f"template=echo $$ >> {pids}; sleep 60 & echo $! >> {pids}; wait",
                             "--trial-timeout", "300", "--storage", f"sqlite:///{tmp_path}/s.db", "--no-tracking"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_cli_env(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        end = time.monotonic() + 60
        while len(pids_in(pids)) < 2 and time.monotonic() < end:
            time.sleep(0.05)
        assert len(pids_in(pids)) >= 2, proc.stderr.read() if proc.poll() is not None else "no command started"
        proc.send_signal(sig)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in proc.stderr.read()
    assert not wait_dead(pids_in(pids), 3.0)




# =============================================================== 9. bad backend options
BAD_OPTIONS = [
    ("template", "echo {tp"), ("template", "echo {nosuchfield}"), ("template", "echo {}"), ("template", "echo {0}"),
    ("template", "echo {tp.real}"), ("template", "echo {tp[0]}"), ("template", "echo {tp:zz}"),
    ("template", "echo {tp:{pp}}"), ("template", ""), ("template", "   "),
    ("template", "echo `echo {model}`"), ("template", "echo ${X:-{model}}"), ("template", "echo $(( {tp} + 1 ))"),
    ("template", "cat <<EOF\n{model}\nEOF"), ("template", "echo \\{model}"), ("template", "echo ${model}"),
    ("template", "echo $'{model}'"), ("template", 'echo "{torchtitan_args}"'), ("template", "echo 'unterminated {tp}"),
    ("template", "echo {tp} )"), ("timeout_s", "-1"), ("timeout_s", "0"), ("timeout_s", "abc"), ("timeout_s", "nan"),
    ("timeout_s", "inf"), ("shell", "/nonexistent"), ("shell", "no-such-shell"), ("shell", "python3"),
    ("shell", "/etc/hostname"), ("shell", ""), ("kill_grace_s", "-1"), ("kill_grace_s", "x"),
]


@pytest.mark.parametrize("option,value", BAD_OPTIONS)
def test_bad_backend_option_is_one_line_and_exit_2_before_any_trial(option, value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    opts = [] if option == "template" else ["--backend-option", f"template=echo {{tp}}; {JSON_LINE}"]
    db = tmp_path / "s.db"
    code, out, err = run(["study", *SCEN, "--strategy", "random", "--trials", "2", "--backend", "command",
                          *opts, "--backend-option", f"{option}={value}", "--storage", f"sqlite:///{db}",
                          "--no-tracking"])
    assert_one_line_error(code, err, f"--backend-option {option}")
    assert repr(value) in err
    assert not db.exists()


def test_bad_backend_option_of_a_worker_is_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path}/s.db"
    assert run(["study", *SCEN, "--strategy", "random", "--trials", "1", "--storage", storage,
                "--study-name", "w", "--no-tracking"])[0] == 0
    code, out, err = run(["worker", "--study-name", "w", "--storage", storage, "--until", "2", "--backend", "command",
                          "--backend-option", "template=echo {tp", "--no-tracking"])
    assert_one_line_error(code, err, "--backend-option template")


def test_good_templates_are_still_accepted(scen, tmp_path):
    """Fields in quotes, in comments, in $( ), escaped braces, the torchtitan options: accepted and run."""
    from autotune.backends.command import CommandBackend
    out = tmp_path / "o"
    for t in (f"{JSON_LINE}; echo {{tp}} \"{{model}}\" '{{placement}}' $(echo {{pp}}) > {out} # tp={{tp}}",
              f"./train.sh {{torchtitan_args}} > /dev/null 2>&1; {JSON_LINE}",
              f"X=\"$(printf '%s' \"{{model}}\")\"; echo \"$X\" > {out}; {JSON_LINE}"):
        b = CommandBackend(template=t, timeout_s=10)
        assert b.render(scen, Config())
    b = CommandBackend(template=f"{JSON_LINE}; echo {{tp}} \"{{model}}\" '{{placement}}' $(echo {{pp}}) > {out} # {{tp}}")
    assert not b.measure(scen, Config()).failed
    assert out.read_text().strip() == "1 llama3-8b dp_out 1"
