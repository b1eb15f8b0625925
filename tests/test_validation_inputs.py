"""Bad input for ``autotune validate --runs`` (issue 13, item 3 and "Bad input"): messy values,
impossible architectures, unknown columns, broken records and fuzzed rows are skipped with a
one-line reason naming row, column and value; a file with no scoreable row exits 2."""
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotune.validation as V
from autotune.validation import validate
from validation_common import _cli, _csv_text, _shipped


# ------------------------------------------------------------------ bad input for --runs (issue 13 item 3)

GOOD = 22  # Korthikanti GPT-22B (8 GPUs, tp=8): a row that scores


def _file(tmp_path, mutate, n_good=1, header=None):
    """A CSV with n_good good rows, then the mutated rows (dicts over the shipped header)."""
    src = _shipped()
    header = header or list(src[0])
    rows = [dict(src[GOOD]) for _ in range(n_good)] + mutate(src)
    p = tmp_path / "runs.csv"
    p.write_text(_csv_text([[r.get(h, "") for h in header] for r in rows], header))
    return p


def _with(src, **kw):
    r = dict(src[GOOD])
    r.update(kw)
    return r


MESSY = [  # column, value, words the reason must contain
    ("tp", "eight", "not a number"), ("tp", "8.5", "not a positive integer"), ("n_gpus", "-8", "positive"),
    ("n_gpus", "nan", "not a number"), ("hidden", "inf", "not a number"), ("hidden", "1e400", "positive"),
    ("n_layers", "0", "positive"), ("seq_len", "", "empty"), ("seq_len", "2048 tokens", "not a number"),
    ("measured_value", "1,42", "not a number"), ("measured_value", "-1.4", "positive"),
    ("measured_value", "", "empty"), ("measured_metric", "seconds", "not one of"),
    ("gpu_type", "Gaudi 3", "hardware preset"), ("precision", "int4", "bf16/fp16/fp8"),
    ("recompute", "sometimes", "none/selective/full"), ("zero_or_fsdp", "megashard", "flavour"),
    ("micro_batch", "0x10", "not a number"), ("vocab", "\x00", "not a number"), ("moe_experts", "-2", "non-negative"),
    ("etp", "two", "not a number"), ("tp_comm_overlap", "maybe", "not yes/no"),
    ("ep_comm_overlap", "sometimes", "not yes/no"), ("ep_dispatcher", "pigeon post", "no known MoE dispatcher"),
    ("optimizer_post_validation", "rarely", "not yes/no"),
    ("hidden", "1e300", "hidden"), ("tp", "1_000", "digits 0-9"), ("n_gpus", "８", "digits 0-9"), ("global_batch_seqs", "3", "multiple of dp*micro_batch"),
]


@pytest.mark.parametrize("column, value, words", MESSY)
def test_messy_values_skip_the_row_naming_row_column_and_value(tmp_path, column, value, words):
    p = _file(tmp_path, lambda src: [_with(src, **{column: value})])
    r = validate(p)
    assert r["n"] == 1 and len(r["skipped"]) == 1
    s = r["skipped"][0]
    assert s["row"] == 2 and s["line"] == 3 and s["column"] == column, s
    assert f"{column}=" in s["reason"] and words in s["reason"], s["reason"]
    assert "\n" not in s["reason"] and len(s["reason"]) < 300


IMPOSSIBLE = [  # an impossible architecture or layout
    ({"hidden": "6145"}, "hidden", "divisible by n_heads"),
    ({"n_kv_heads": "5"}, "n_kv_heads", "not divisible by n_kv_heads"),
    ({"n_heads": "4", "n_kv_heads": "4"}, "tp", "tp must divide n_heads"),
    ({"n_layers": "2", "pp": "4", "tp": "2"}, "pp", "more pipeline stages"),
    ({"pp": "2", "tp": "4", "n_layers": "4", "vpp": "4", "pipeline_schedule": "interleaved"}, "vpp", "model chunks"),
    ({"pp": "2", "tp": "4", "pipeline_schedule": "round robin"}, "pipeline_schedule", "no known schedule"),
    ({"moe_experts": "8", "moe_topk": "9"}, "moe_topk", "1..moe_experts"),
    ({"ep": "2"}, "ep", "dense model"),
    ({"etp": "1"}, "etp", "dense model"),
    ({"ep_comm_overlap": "yes"}, "ep_comm_overlap", "dense model"),
    ({"moe_experts": "8", "moe_topk": "2", "etp": "3"}, "etp", "etp must divide tp"),
    ({"moe_experts": "8", "moe_topk": "2", "ep": "8", "etp": "8"}, "ep", "etp*ep"),
    ({"cp": "8", "tp": "1", "seq_len": "2056"}, "cp", "seq_len/2"),
    ({"precision": "fp8"}, "precision", "no fp8 peak"),
    ({"n_gpus": "12", "tp": "4", "dp": "", "global_batch_seqs": "12"}, "n_gpus", "NVLink"),
    ({"dp": "2"}, "dp", "does not match n_gpus"),
    ({"n_gpus": "7"}, "n_gpus", "not divisible by tp*pp*cp"),
    # measurements no run can have made, and rows the model would map to the wrong part or layout
    ({"measured_metric": "mfu_pct", "measured_value": "150"}, "measured_value", "from 1 to 100"),
    ({"measured_metric": "mfu_pct", "measured_value": "0.45"}, "measured_value", "not 0.45"),
    ({"measured_metric": "tflops_per_gpu", "measured_value": "5000"}, "measured_value", "dense bf16 peak, 312"),
    ({"gpu_type": "H100 PCIe 80GB"}, "gpu_type", "PCIe card"),
    ({"gpu_type": "A100-PCIE-40GB"}, "gpu_type", "PCIe card"),
    ({"moe_topk": "2"}, "moe_topk", "dense model"),
    ({"pp": "2", "tp": "4", "vpp": "1", "pipeline_schedule": "interleaved 1F1B"}, "vpp", "plain 1F1B"),
]


def test_unstated_degrees_and_top_k_are_printed_assumptions(tmp_path):
    rows = lambda src: [_with(src, pp=""), _with(src, moe_experts="8", moe_topk="")]  # noqa: E731
    r = validate(_file(tmp_path, rows, n_good=0))
    assert r["n"] == 2, r["skipped"]
    said = [" ".join(x["assumptions"]) for x in r["rows"]]
    assert "pp=1 (not stated)" in said[0] and "tp=1" not in said[0]
    assert "moe_topk=1 (not stated)" in said[1] and "tp=1" not in said[1]


@pytest.mark.parametrize("update, column, words", IMPOSSIBLE)
def test_impossible_architectures_are_skipped(tmp_path, update, column, words):
    p = _file(tmp_path, lambda src: [_with(src, **update)])
    r = validate(p)
    assert r["n"] == 1 and len(r["skipped"]) == 1, r["skipped"]
    s = r["skipped"][0]
    assert s.get("column") == column and words in s["reason"], s


def test_unknown_columns(tmp_path):
    """A misspelt known column skips the rows that fill it (never silently assumed); any other
    unknown column is ignored and listed; header names are matched trimmed and case-blind."""
    src = _shipped()
    header = [" TP " if h == "tp" else ("micro_bach" if h == "micro_batch" else h) for h in src[0]] + ["url"]
    good = dict(src[GOOD], micro_batch="", url="https://x")
    typo = dict(src[GOOD], micro_batch="2", url="")
    rows = [[r.get(h.strip().lower() if h != "micro_bach" else "micro_batch", "") for h in header[:-1]] + [r["url"]]
            for r in (good, typo)]
    p = tmp_path / "u.csv"
    p.write_text(_csv_text(rows, header))
    code, out, err = _cli("validate", "--runs", str(p), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["n"] == 1 and d["ignored_columns"] == ["url"]
    s = d["skipped"][0]
    assert s["row"] == 2 and s["column"] == "micro_bach" and s["value"] == "2"
    assert "did you mean 'micro_batch'" in s["reason"]
    code, out, err = _cli("validate", "--runs", str(p))
    assert code == 0 and "ignored columns" in out and "row 2 (line 3): micro_bach='2'" in out


def test_records_with_the_wrong_field_count_and_broken_quoting(tmp_path):
    src = _shipped()
    header = list(src[0])
    good = _csv_text([list(src[GOOD].values())], header)
    extra = _csv_text([list(src[GOOD].values()) + ["surplus"]], header).splitlines()[1]
    short = ",".join(list(src[GOOD].values())[1:5])
    multiline = _csv_text([list(_with(src, model_name="GPT\n22B", notes="a\nb").values())], header).split("\n", 1)[1]
    p = tmp_path / "f.csv"
    p.write_text(good + extra + "\n" + short + "\n" + multiline + '"unterminated,1,2\n')
    code, out, err = _cli("validate", "--runs", str(p), "--json")
    assert code == 0, err
    d = json.loads(out)
    reasons = {s["row"]: s["reason"] for s in d["skipped"]}
    n = len(V.COLUMNS)
    assert f"{n + 1} fields, the header {n}" in reasons[2] and f"4 fields, the header {n}" in reasons[3]
    assert d["n"] == 2  # the quoted multi-line fields are one record, scored
    assert any(r["model_name"] == "GPT\n22B" for r in d["rows"])
    assert all("\n" not in s["model_name"] for s in d["skipped"])
    assert 5 in reasons  # the unterminated quote: a reason, not a traceback
    code, out, err = _cli("validate", "--runs", str(p))
    assert code == 0 and "GPT 22B" in out and not any(line.startswith("22B") for line in out.splitlines())


@pytest.mark.parametrize("content, needle", [
    ("", "missing"),
    (None, "scoreable"),  # header only
    ("garbage", "scoreable"),  # rows, none scoreable
    ("dup", "repeated"),
    ("typo", "misspelt"),
    (b"\xff\xfe\x00bin", "UTF-8"),
    ("semicolons", "separated by semicolons"),
    ("blank", "line 1 is blank"),
    (b"model\x00name,tp\n", "NUL bytes"),
    (b"source,model_name\nx,caf\xe9\n", "line 2 has byte 0xe9"),
])
def test_files_without_a_scoreable_row_exit_2_in_one_line(tmp_path, content, needle):
    src = _shipped()
    header = list(src[0])
    p = tmp_path / "bad.csv"
    if content is None:
        p.write_text(",".join(header) + "\n")
    elif content == "garbage":
        p.write_text(_csv_text([list(_with(src, tp="x").values()), list(_with(src, hidden="?").values())], header))
    elif content == "dup":
        p.write_text(",".join(header + ["TP"]) + "\n")
    elif content == "typo":
        p.write_text(",".join(["measured_vlaue" if h == "measured_value" else h for h in header]) + "\n")
    elif content == "semicolons":
        p.write_text(";".join(header) + "\n")
    elif content == "blank":
        p.write_text("\n" + ",".join(header) + "\n")
    elif isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    code, out, err = _cli("validate", "--runs", str(p))
    assert code == 2, (out, err)
    err = err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and "--runs" in err and needle in err, err
    if content == "garbage":
        assert "row 1: tp='x'" in err


def test_no_scoreable_row_through_the_real_command_line(run_cli, tmp_path):
    p = _file(tmp_path, lambda src: [_with(src, hidden="lots")], n_good=0)
    r = run_cli("validate", "--runs", str(p), "--json")
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert [s["column"] for s in json.loads(r.stdout)["skipped"]] == ["hidden"]     # every row's reason
    assert err.startswith("autotune: error: --runs") and "row 1: hidden='lots': not a number" in err, err


TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["", "0", "-1", "1e999", "nan", "8", "8.0", "3", "fp8",
                                                         "1F1B", "zero3", "full", "\n", '"', ",", "1e300"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.dictionaries(st.sampled_from(V.COLUMNS), TEXT, min_size=1, max_size=4))
def test_fuzzed_rows_are_scored_or_skipped_with_a_reason(tmp_path, cells):
    """Any values in any columns: the good row is scored, the fuzzed row is scored or skipped
    with a one-line reason; nothing raises."""
    p = _file(tmp_path, lambda src: [_with(src, **cells)])
    r = validate(p)
    assert r["n"] + len(r["skipped"]) == 2 and r["n"] >= 1
    for s in r["skipped"]:
        assert s["reason"] and "\n" not in s["reason"] and s["row"] == 2
    for x in r["rows"]:
        assert math.isfinite(x["predicted"]) and x["predicted"] > 0
