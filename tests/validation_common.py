"""Helpers shared by the runs-validation tests (test_validation.py, test_validation_inputs.py)."""
import csv
import io
from contextlib import redirect_stderr, redirect_stdout

from autotune.cli import main
from autotune.validation import shipped_runs_path


def _shipped():
    return list(csv.DictReader(open(shipped_runs_path())))


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _csv_text(rows, header):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    for r in rows:
        w.writerow(r)
    return buf.getvalue()
