"""Hardening (issue 17, item 10 and part of items 4-5): numbers, duplicate keys, nesting, aliases,
file sizes, and a SQLite file another worker is creating."""
from __future__ import annotations

import time

import pytest

from hardening_common import SCEN, SMALL, assert_one_line_error, run


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
