"""Hardening (issue 17, item 2): passwords in URIs never reach output, errors, or MLflow."""
from __future__ import annotations

import json
from urllib.parse import quote

import optuna
import pytest

from hardening_common import SMALL, assert_one_line_error, run


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
