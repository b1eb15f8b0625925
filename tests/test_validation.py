import csv
import io

import pytest

from autotune.errors import UserInputError
from autotune.validation import map_flavour, map_gpu, map_schedule, shipped_runs_path, validate


def test_published_runs_figures():
    """The tracked figures of the shipped calibration (README): median <= 10%, p90 <= 25%."""
    r = validate()
    assert r["n"] >= 100
    assert r["median_ape"] <= 10.0
    assert r["p90_ape"] <= 25.0
    korthikanti = [x["ape"] for x in r["rows"] if 23 <= x["row"] <= 30]
    assert len(korthikanti) == 8 and sum(korthikanti) / 8 <= 3.65
    for s in r["skipped"]:
        assert s["reason"]


def test_mapping_rules_on_free_text():
    assert map_gpu("A100-SXM4-80GB (Selene)") == "a100-80gb"
    assert map_gpu("H100-SXM5-80GB (DGX H100)") == "h100-sxm"
    assert map_gpu("NVIDIA GB200 NVL72 rack") == "gb200-nvl72"
    assert map_gpu("TPU v5p") is None
    assert map_schedule("1F1B/interleaved (not stated)", 0) == "1f1b"
    assert map_schedule("ZB-2p", 0) == "zb2p"
    assert map_schedule("interleaved-1F1B", 0) == "interleaved_1f1b"
    assert map_schedule("1F1B", 3) == "interleaved_1f1b"
    assert map_flavour("zero3") == "fsdp" and map_flavour("hsdp") == "hsdp" and map_flavour("") == "ddp"


def _write(tmp_path, rows, header=None):
    src = list(csv.DictReader(open(shipped_runs_path())))
    header = header or list(src[0].keys())
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore")
    w.writeheader()
    for r in rows(src):
        w.writerow(r)
    p = tmp_path / "runs.csv"
    p.write_text(buf.getvalue())
    return p


def test_bad_rows_are_skipped_with_reasons(tmp_path):
    def rows(src):
        a = dict(src[22]); a["gpu_type"] = "Gaudi 3"
        b = dict(src[22]); b["tp"] = "3"
        c = dict(src[22]); c["measured_value"] = "n/a"
        return [src[22], a, b, c]
    r = validate(_write(tmp_path, rows))
    assert r["n"] == 1 and len(r["skipped"]) == 3
    reasons = " ".join(s["reason"] for s in r["skipped"])
    assert "gpu_type" in reasons and "n_gpus" in reasons and "measured_value" in reasons


def test_a_csv_without_the_columns_is_an_error(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(UserInputError) as ei:
        validate(p)
    assert "--runs" in str(ei.value) and "missing" in str(ei.value)
