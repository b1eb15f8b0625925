"""Hardening (issue 17, items 1, 2, 8 and 9): shell injection through the ``command`` backend,
passwords in URIs, commands that outlive their trial or flood memory, and bad backend options.

Each item has tests that fail on the code before these fixes; the few that pass there pin what
must not regress (URIs without secrets shown as they are, option checks and templates that
already worked)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from contextlib import redirect_stderr, redirect_stdout
from urllib.parse import quote

import optuna
import pytest
import yaml

from autotune.cli import main
from autotune.specs import Config, build_scenario
from autotune.specs.presets import preset_dict

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


# =============================================================== 1. shell injection
MARK = "PWNED"


def payloads(marker) -> list[str]:
    """Each one runs ``touch marker`` if a field reaches the shell unquoted or badly quoted."""
    m = str(marker)
    return [f"x; touch {m}; echo", f"$(touch {m})", f"`touch {m}`", f"x\ntouch {m}\necho",
            f"x' ; touch {m} ; echo '", f'x" ; touch {m} ; echo "', f"x'\"$(touch {m})\"'",
            f"x\\'; touch {m}; echo \\'", f"a b && touch {m} || touch {m}", f"x | touch {m}"]


def with_model_name(scen, name):
    """The scenario with a model name that never went through validation (a tampered study,
    a plugin building specs by hand)."""
    return scen.model_copy(update={"model": scen.model.model_copy(update={"name": name})})


CONTEXTS = {                         # where a field can sit in a template, and what it prints
    "bare": ("printf %s {F} > {out}", ""),
    "double-quoted": ('printf %s "{F}" > {out}', ""),
    "single-quoted": ("printf %s '{F}' > {out}", ""),
    "command substitution": ('printf %s "$(printf %s {F})" > {out}', ""),
    "option value": ("printf %s --model={F} > {out}", "--model="),
    "comment": ("printf %s {F} > {out} # and again: {F}", ""),
}


@pytest.mark.filterwarnings("ignore::UserWarning")          # pydantic on the hand-made configurations
@pytest.mark.parametrize("context", CONTEXTS)
def test_quoting_alone_stops_every_payload_in_every_field(context, scen, tmp_path, monkeypatch):
    """Payloads in the model name and in every configuration field, with the safe-character
    check of values switched off: quoting alone must keep each value one literal word."""
    from autotune.backends import command
    monkeypatch.setattr(command, "SAFE_VALUE_CHARS", None, raising=False)
    marker, out = tmp_path / MARK, tmp_path / "out"
    ran = 0
    fields = ["model"] + list(Config.model_fields)
    for field in fields:
        shape, prefix = CONTEXTS[context]
        template = JSON_LINE + "; " + shape.replace("{F}", "{" + field + "}").replace("{out}", str(out))
        b = command.CommandBackend(template=template, timeout_s=10)
        for p in payloads(marker):
            s, cfg = scen, Config()
            if field == "model":
                s = with_model_name(scen, p)
            else:
                cfg = Config.model_construct(**(Config().model_dump() | {field: p}))
            out.unlink(missing_ok=True)
            try:
                m = b.measure(s, cfg)
            except Exception:        # noqa: BLE001 - refusing a value is fine; running it is not
                m = None
            assert not marker.exists(), (context, field, p)
            if m is not None and not m.failed and field in ("model", "placement", "collective"):
                assert out.read_text() == prefix + p, (context, field, p, out.read_text())
                ran += 1
    assert ran > 0                      # the commands did run, each value arriving exactly as it was


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_safe_value_check_refuses_payloads_before_any_shell(scen, tmp_path):
    from autotune.backends.command import CommandBackend
    marker = tmp_path / MARK
    b = CommandBackend(template=f"echo {{model}} {{placement}}; {JSON_LINE}", timeout_s=10)
    for p in payloads(marker):
        m = b.measure(with_model_name(scen, p), Config())
        assert m.failed and "model" in m.reason and not marker.exists()
        m = b.measure(scen, Config.model_construct(**(Config().model_dump() | {"placement": p})))
        assert m.failed and "placement" in m.reason and not marker.exists()
    assert not b.measure(scen, Config()).failed


def test_names_with_spaces_and_parentheses_still_reach_the_command_as_one_word(scen, tmp_path):
    from autotune.backends.command import CommandBackend
    out = tmp_path / "argv"
    b = CommandBackend(template=f"{sys.executable} -c 'import sys, json; print(json.dumps(sys.argv[1:]))' "
                                f"{{model}} --x=\"{{model}}\" > {out}; {JSON_LINE}")
    name = "GPT-174.6B (PTD-P)"
    assert not b.measure(with_model_name(scen, name), Config()).failed
    assert json.loads(out.read_text()) == [name, f"--x={name}"]


@pytest.mark.parametrize("how", ["--set", "scenario file"])
def test_injection_through_the_cli_never_runs(how, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / MARK
    refused = 0
    for i, p in enumerate(payloads(marker)):
        if how == "--set":
            src = [*SCEN, "--set", f"model.name={p}"]
        else:
            model = preset_dict("models", "llama3-8b") | {"name": p}
            f = tmp_path / "scen.yaml"
            f.write_text(yaml.safe_dump({"model": model, "cluster": preset_dict("clusters", "metro-2bldg")}))
            src = ["--scenario", str(f)]
        db = tmp_path / f"s{i}.db"
        code, out, err = run(["study", *src, "--strategy", "random", "--trials", "1", "--backend", "command",
                              "--backend-option", f"template=echo {{model}}; {JSON_LINE}",
                              "--storage", f"sqlite:///{db}", "--no-tracking"])
        assert not marker.exists(), p
        if code != 0:       # YAML folds "x\ntouch m\necho" given to --set into a harmless "x touch m echo"
            assert_one_line_error(code, err, "model.name")
            assert not db.exists()
            refused += 1
    assert refused >= len(payloads(marker)) - 1


def test_injection_through_a_tampered_shared_study_never_runs(tmp_path, monkeypatch):
    """A worker reads the scenario from the shared storage: a name planted there must not run."""
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path}/s.db"
    code, out, err = run(["study", *SCEN, "--strategy", "random", "--trials", "1", "--storage", storage,
                          "--study-name", "shared", "--no-tracking", "--json"])
    assert code == 0, err
    marker = tmp_path / MARK
    study = optuna.load_study(study_name="shared", storage=storage)
    scen = build_scenario("llama3-8b", "metro-2bldg")
    for p in payloads(marker)[:4]:
        bad = with_model_name(scen, p)
        study._storage.set_study_system_attr(study._study_id, "autotune:scenario_json", bad.model_dump_json())
        code, out, err = run(["worker", "--study-name", "shared", "--storage", storage, "--until", "3",
                              "--backend", "command", "--backend-option", f"template=echo {{model}}; {JSON_LINE}",
                              "--no-tracking"])
        assert not marker.exists(), p
        assert_one_line_error(code, err, "model.name")


# =============================================================== 2. passwords
P = "zzA/zzB@zzC:zzD%zzE?zzF"           # every secret below contains "zz"; nothing else does
Q = quote(P, safe="")
URIS = [
    "postgresql://alice:zzpw@db.example.com:5432/autotune",
    f"postgresql://alice:{P}@db.example.com:5432/autotune",
    f"postgresql://alice:{Q}@db.example.com/autotune",
    f"postgresql+psycopg://alice:{P}@db.example.com/autotune",
    f"postgresql+psycopg://alice:{Q}@db.example.com:5432/autotune?sslmode=require",
    "postgres://alice:zzA/zzB@db/x",
    "postgresql://alice:zzA@zzB@db/x",
    "postgresql://alice:zzA?zzB@db/x",
    "postgresql://alice:zzA#zzB@db/x",
    "postgresql://alice:zzA:zzB@db/x",
    "postgresql://:zzEmptyUser@db/x",
    "postgresql://alice:zzpw@[::1]:5432/x",
    "postgresql://alice:zzpw@[::1/x",
    "postgresql://db.example.com/x?password=zzQ",
    f"postgresql://alice@db/x?sslmode=require&password={P}",
    f"postgresql://alice@db/x?password={Q}&application_name=autotune",
    "postgresql://alice@db/x?sslpassword=zzK&sslmode=verify-full",
    "postgresql:///x?host=/var/run/postgresql&password=zzQ",
    "postgresql://alice:zzpw@db/x?PassWord=zzQ",
    "postgresql://alice:zzpw@db/x?pass%77ord=zzQ",
    "postgresql://alice:zzpw@db:notaport/x",
    "postgresql://alice:zzpw@",
    "postgresql://alice:zzpw",
    "postgresql://alice:zz pw@db/x",
    f"mysql://root:{P}@127.0.0.1:3306/autotune",
    f"mysql+pymysql://root:{Q}@localhost/autotune?charset=utf8mb4",
    "mysql://root:zzpw@localhost/autotune?ssl_key=/k.pem&token=zzT",
    "mysql://root:zzA%zzB@localhost/x",
    "sqlite:///autotune.db?password=zzQ",
    "sqlite:////abs/path/autotune.db?mode=ro&secret=zzS",
    f"http://bob:{P}@mlflow.example.com:5000",
    f"https://bob:{Q}@mlflow.example.com/",
    "https://zzTokenAsUser@mlflow.example.com/",
    "https://mlflow.example.com/?token=zzT&x=1",
    "https://mlflow.example.com/?x=1;token=zzT",
    "https://mlflow.example.com/api?api_key=zzK#access_token=zzF",
    "http://bob:zzpw@mlflow.example.com/path/with@sign",
    "HTTPS://Bob:zzPW@Host.example.com",
    "file://bob:zzpw@host/share/mlruns",
    "alice:zzpw@db.example.com/x",
    "postgresql:alice:zzpw@db/x",
    "://alice:zzpw@db/x",
    "post gres://alice:zzpw@db/x",
    "postgresql://alice:zzpw@db/x?options=-csearch_path%3Dpublic&x=a@b",
]
CLEAN = ["sqlite:///autotune.db", "sqlite:////abs/path/autotune.db", "/home/bob/autotune.db", "autotune.db",
         "memory", "file:///home/bob/mlruns", "http://[::1]:5000", "databricks://profile",
         "postgresql://alice@db.example.com:5432/x?sslmode=require", "https://mlflow.example.com:5000/",
         "postgresql+psycopg://db/x", "http://127.0.0.1:5000"]


def leaked(text: str) -> bool:
    return "zz" in text.lower()


def test_uri_forms_cover_the_brief():
    assert len(URIS) >= 30
    assert all(leaked(u) for u in URIS) and not any(leaked(u) for u in CLEAN)


@pytest.mark.parametrize("uri", URIS)
def test_mask_uri_hides_every_password(uri):
    from autotune.tracking import mask_text, mask_uri
    m = mask_uri(uri)
    assert not leaked(m), (uri, m)
    assert "***" in m
    assert not leaked(mask_text(f"OperationalError: could not connect to {uri} (retrying)"))
    assert not leaked(mask_text(f"url='{uri}'"))


@pytest.mark.parametrize("uri", CLEAN)
def test_mask_uri_leaves_uris_without_secrets_alone(uri):
    from autotune.tracking import mask_uri
    assert mask_uri(uri) == uri


def test_mask_uri_shape_of_well_formed_urls():
    from autotune.tracking import mask_uri
    assert mask_uri(f"postgresql://alice:{Q}@db.example.com:5432/autotune") == \
        "postgresql://alice:***@db.example.com:5432/autotune"
    assert mask_uri("postgresql://alice:zzA@zzB:zzC@db/x") == "postgresql://alice:***@db/x"
    assert mask_uri("postgresql://alice:zzA/zzB@db/x") == "postgresql://***@db/x"       # or host zzA, path /zzB@db/x
    assert mask_uri("postgresql://alice:zzA?zzB@db/x") == "postgresql://***"            # or a query zzB@db/x
    assert mask_uri(f"postgresql+psycopg://alice:{Q}@db:5432/a?sslmode=require&password=zzQ") == \
        "postgresql+psycopg://alice:***@db:5432/a?sslmode=require&password=***"
    assert mask_uri("postgresql://:zzpw@db/x") == "postgresql://:***@db/x"
    assert mask_uri("https://zzToken@mlflow.example.com/") == "https://***@mlflow.example.com/"
    assert mask_uri(None) is None


@pytest.fixture
def in_memory_storage(monkeypatch):
    """Any --storage URL opens an in-memory study (so that every URI form runs a real study);
    no plots (they take longer than the study)."""
    from autotune import report
    from autotune import study as study_mod
    from autotune.study import runner as study_runner
    monkeypatch.setattr(study_runner, "open_storage", lambda url: optuna.storages.InMemoryStorage())
    def no_plot(data, path, *a, **kw):
        open(path, "wb").close()
    monkeypatch.setattr(report, "convergence_plot", no_plot)
    monkeypatch.setattr(report, "breakdown_plot", no_plot)
    return study_mod


def test_no_password_in_human_or_json_output(in_memory_storage, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for uri in URIS:
        for fmt in ([], ["--json"]):
            code, out, err = run(["study", *SMALL, "--strategy", "random", "--trials", "1", "--storage", uri,
                                  "--no-tracking", *fmt])
            assert code == 0, err
            assert not leaked(out + err), (uri, out + err)
            if fmt:
                assert "***" in json.loads(out)["storage"]
            else:
                assert "***" in out


def test_no_password_in_exit_2_lines(monkeypatch, tmp_path):
    """The storage rejects the URL with a message that repeats it (as drivers do)."""
    monkeypatch.chdir(tmp_path)

    def refuse(url, **kw):
        raise RuntimeError(f"cannot open {url}")
    monkeypatch.setattr(optuna.storages, "RDBStorage", refuse)
    for uri in URIS:
        code, out, err = run(["study", *SMALL, "--trials", "1", "--storage", uri, "--no-tracking"])
        assert_one_line_error(code, err, "--storage")
        assert not leaked(out + err), (uri, err)


def test_no_password_in_exit_2_lines_from_real_drivers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for uri in (f"postgresql://alice:{P}@127.0.0.1:1/x", f"postgresql://alice:{Q}@127.0.0.1:1/x?password=zzQ",
                "postgresql://alice:zzpw@[::1/x", f"mysql://root:{P}@127.0.0.1:1/x", "nosuchdb://u:zzpw@x",
                "postgresql://alice:zzpw@127.0.0.1:notaport/x"):
        code, out, err = run(["study", *SMALL, "--trials", "1", "--storage", uri, "--no-tracking"])
        assert_one_line_error(code, err, "--storage")
        assert not leaked(out + err), (uri, err)
        assert "***" in err


def test_no_password_in_tracking_uri_errors(monkeypatch, tmp_path):
    """Every form as --tracking-uri, with an MLflow client that fails the way MLflow does (its
    messages repeat the URI), then a few against the real MLflow."""
    monkeypatch.chdir(tmp_path)
    import mlflow.tracking

    class Refusing:
        def __init__(self, uri=None, *a, **kw):
            raise RuntimeError(f"unsupported URI {uri!r}")
    storage = f"sqlite:///{tmp_path}/s.db"
    with monkeypatch.context() as m:
        m.setattr(mlflow.tracking, "MlflowClient", Refusing)
        for uri in URIS:
            code, out, err = run(["study", *SMALL, "--trials", "1", "--storage", storage, "--tracking-uri", uri])
            assert_one_line_error(code, err, "--tracking-uri")
            assert not leaked(out + err), (uri, err)
    for uri in ("nosuchdb://u:zzpw@x", "postgresql://alice:zzpw@[::1/x", f"http://bob:{P}@127.0.0.1:1"):
        code, out, err = run(["study", *SMALL, "--trials", "1", "--storage", storage, "--tracking-uri", uri])
        assert_one_line_error(code, err, "--tracking-uri")
        assert not leaked(out + err), (uri, err)


def test_no_password_in_exit_3_lines(in_memory_storage, monkeypatch, tmp_path):
    import sqlalchemy.exc
    monkeypatch.chdir(tmp_path)

    class Gone(optuna.storages.InMemoryStorage):
        """The server goes away once the study is open: every read of its trials fails."""
        def get_n_trials(self, *a, **kw):
            raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))

        get_all_trials = get_n_trials
    from autotune.study import runner, storage
    monkeypatch.setattr(runner, "open_storage", lambda url: Gone())
    monkeypatch.setattr(storage, "STORAGE_RETRIES", 0)
    for uri in URIS:
        code, out, err = run(["study", *SMALL, "--strategy", "random", "--trials", "1", "--storage", uri,
                              "--no-tracking"])
        assert_one_line_error(code, err, "--storage", exit_code=3)
        assert not leaked(out + err), (uri, err)


def test_no_password_when_tracking_goes_away(in_memory_storage, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)

    class DeadTracker:
        def __init__(self, uri, *a, **kw):
            self.parent_id, self.retries, self.dead = "run", 3, "ConnectionError"
            self.errors = [f"trial: ConnectionError: {uri} refused"]

        def log_trial(self, *a, **kw): ...
        def log_study(self, *a, **kw): ...
        def log_artifact(self, *a, **kw): ...
        def flush(self, *a, **kw): ...
    from autotune.study import session
    monkeypatch.setattr(session, "Tracker", DeadTracker)
    for uri in URIS:
        code, out, err = run(["study", *SMALL, "--strategy", "random", "--trials", "1", "--storage", uri,
                              "--tracking-uri", uri])
        assert_one_line_error(code, err, "--tracking-uri", exit_code=3)
        assert not leaked(out + err), (uri, err)


def test_no_password_in_mlflow_tags_params_and_errors(in_memory_storage, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from mlflow.tracking import MlflowClient
    tracking = f"sqlite:///{tmp_path}/mlflow.db"
    forms = URIS[1::3] + ["postgresql://alice:zzA@zzB@db/x", "https://zzTokenAsUser@mlflow.example.com/"]
    for i, uri in enumerate(forms):
        code, out, err = run(["study", *SMALL, "--strategy", "random", "--trials", "1", "--storage", uri,
                              "--study-name", f"s{i}", "--tracking-uri", tracking, "--json"])
        assert code == 0, err
        assert not leaked(out + err), (uri, out + err)
    client = MlflowClient(tracking)
    exp = client.get_experiment_by_name("autotune")
    runs = client.search_runs([exp.experiment_id], max_results=10000)
    parents = [r for r in runs if r.data.tags.get("autotune.role") == "study"]
    assert len(parents) == len(forms) and len(runs) > len(forms)
    for r in runs:
        text = json.dumps(r.data.params) + json.dumps(r.data.tags)
        assert not leaked(text), text
    assert all("***" in r.data.tags["autotune.storage"] for r in parents)


def test_tracker_error_messages_are_masked():
    """Errors logged during a study are free text that may quote a URI."""
    from autotune.tracking import mask_text
    for uri in URIS:
        for msg in (f"HTTPConnectionPool: Max retries exceeded with url {uri}", f"({uri})", f"<{uri}>",
                    f"password={P} user=alice", f"token: zzT at {uri},"):
            assert not leaked(mask_text(msg)), (msg, mask_text(msg))
    assert mask_text("no secrets here: sqlite:///x.db") == "no secrets here: sqlite:///x.db"


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


# ---- issue 17 item 10 and part of items 4-5: numbers, duplicate keys, nesting, aliases, file size --------
@pytest.mark.parametrize("value,needle", [("4611686018427387904", "less than or equal"), ("1_000", "digits 0-9"),
                                          ("\u0668", "digits 0-9"), ("8.0", "digits 0-9")])
def test_integer_knobs_are_bounded_and_ascii(value, needle):
    code, _, err = run(["evaluate", *SCEN, "--config", f"tp=8,micro_batch={value}"])
    assert_one_line_error(code, err, "config.micro_batch", needle)


def test_huge_parallel_degree_is_refused_before_any_product_overflows():
    code, _, err = run(["evaluate", *SCEN, "--config", f"tp={1 << 40}"])
    assert_one_line_error(code, err, "config.tp")


def scenario_text(extra: str = "") -> str:
    return "model: llama3-8b\ncluster: metro-2bldg\n" + extra


@pytest.mark.parametrize("text,needle", [
    (scenario_text("model: llama3-70b\n"), "duplicate keys ('model' twice, line 3)"),
    ("model: " + "[" * 300 + "]" * 300 + "\ncluster: metro-2bldg\n", "nested at most"),
    ("a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
     "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n" + scenario_text(), "100,000 nodes"),
])
def test_scenario_yaml_limits_are_one_line_errors(tmp_path, text, needle):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    t0 = time.perf_counter()
    code, _, err = run(["evaluate", "--scenario", str(f), "--config", "tp=8"])
    assert_one_line_error(code, err, "--scenario", needle)
    assert time.perf_counter() - t0 < 10


def test_scenario_file_over_the_size_limit_is_refused_unread(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_text(scenario_text() + "# " + "x" * (1 << 20) + "\n")
    code, _, err = run(["evaluate", "--scenario", str(f), "--config", "tp=8"])
    assert_one_line_error(code, err, "--scenario", "at most 1024 KiB")


def test_configuration_file_with_duplicate_keys_is_refused(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("tp: 8\npp: 2\ntp: 4\n")
    code, _, err = run(["evaluate", *SCEN, "--config", str(f)])
    assert_one_line_error(code, err, "--config", "'tp' twice")


NO_LEGAL = ["--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "4096", "--global-batch", "1"]


@pytest.mark.parametrize("cmd", [["space"], ["search"], ["study", "--trials", "2"],
                                 ["compare", "--strategies", "random", "--budget", "3", "--seeds", "1"]])
def test_no_legal_configuration_exits_2_with_a_hint_and_writes_nothing(cmd, tmp_path, monkeypatch):
    """Issue 17 item 4: a scenario with no legal configuration crashed `study` (max() of an empty
    sequence) and gave exit 0 from `space` and `search`."""
    monkeypatch.chdir(tmp_path)
    extra = ["--storage", f"sqlite:///{tmp_path}/s.db", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"] \
        if cmd[0] == "study" else (["--out", str(tmp_path / "cmp")] if cmd[0] == "compare" else [])
    code, out, err = run([*cmd, *NO_LEGAL, *extra])
    assert code == 2 and "Traceback" not in err
    assert "at least one legal configuration" in err and "--global-batch" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_bench_rows_are_bounded():
    code, _, err = run(["bench", "--rows", str(10**9)])
    assert code == 2 and "--rows" in err and len(err.strip().splitlines()) == 1


def test_compare_out_that_is_a_file_exits_2(tmp_path):
    f = tmp_path / "afile"
    f.write_text("keep")
    code, _, err = run(["compare", *SMALL, "--strategies", "random", "--budget", "3", "--seeds", "1", "--out", str(f),
                        "--no-tracking"])
    assert code == 2 and "--out" in err and "Traceback" not in err and f.read_text() == "keep"


def test_negative_seed_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    """Issue 17 item 4/6: `--seed -1` gave a numpy traceback after the study row was written."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["study", *SMALL, "--trials", "2", "--seed", "-1", "--no-tracking",
                        "--storage", f"sqlite:///{tmp_path}/s.db"])
    assert code == 2 and "--seed" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_unreachable_tracking_leaves_no_study_behind(tmp_path, monkeypatch):
    """Issue 17 item 6: an unreachable --tracking-uri was found only after the study was created."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["study", *SMALL, "--trials", "2", "--tracking-uri", "http://127.0.0.1:1",
                        "--storage", f"sqlite:///{tmp_path}/s.db"])
    assert code == 2 and "--tracking-uri" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_space_too_large_for_memory_is_one_line_before_it_is_allocated(monkeypatch, tmp_path):
    """Issue 17 item 5: `space` and `search` built every candidate row at once (a scenario within
    the validators asked for ~289M rows, ~23 GB). The legal core is now built in chunks and refused
    in one line when the legal rows alone would not fit."""
    import numpy as np

    import autotune.space as space_mod
    from autotune.space import FIELDS, SearchSpace
    from autotune.specs.presets import build_scenario
    scen = build_scenario("llama3-8b", "metro-2bldg")
    whole = SearchSpace(scen).legal_core
    monkeypatch.setattr(space_mod, "CHUNK_ROWS", 5000)          # chunked: the same rows, in the same order
    chunked = SearchSpace(scen).legal_core
    assert all(np.array_equal(whole[k], chunked[k]) for k in FIELDS)
    monkeypatch.setattr(space_mod, "MAX_LEGAL_CORE_BYTES", 2**20)
    monkeypatch.chdir(tmp_path)
    for cmd in ("space", "search"):
        code, out, err = run([cmd, "--model", "llama3-8b", "--cluster", "metro-2bldg"])
        assert code == 2 and len(err.strip().splitlines()) == 1 and "GiB" in err and "--gpus" in err


def test_an_empty_file_another_worker_is_creating_is_not_called_truncated(tmp_path):
    """SQLite creates the file on connect and writes its header with the first transaction: a second
    worker starting in between sees 0 bytes for a moment and must wait, not refuse (CI, stop 27)."""
    import sqlite3
    import threading
    from autotune.errors import StorageCorrupt
    from autotune.sqlitecheck import EMPTY_GRACE_S, check_sqlite_url
    path = tmp_path / "s.db"
    path.touch()

    def create():
        time.sleep(0.3)
        con = sqlite3.connect(path)
        con.execute("create table t (x)")
        con.commit()
        con.close()
    t = threading.Thread(target=create)
    t.start()
    check_sqlite_url(f"sqlite:///{path}", "--storage")          # waits, then finds a healthy database
    t.join()
    stays_empty = tmp_path / "empty.db"
    stays_empty.touch()
    t0 = time.monotonic()
    with pytest.raises(StorageCorrupt, match="empty"):
        check_sqlite_url(f"sqlite:///{stays_empty}", "--storage")
    assert time.monotonic() - t0 >= EMPTY_GRACE_S
