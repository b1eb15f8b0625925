"""Reading a runs file: the CSV's header and records, each record through ``rows.build_case`` and
a scoreability check, or into a skipped entry naming the row, the column, the value and the
reason; the file as a whole is a one-line UserInputError where it cannot be read at all."""
from __future__ import annotations

import csv
import difflib
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..costmodel.params import CostParams
from ..errors import UserInputError
from .columns import COLUMNS, REQUIRED_COLUMNS, TYPO_CUTOFF, Skip, one_line, shipped_runs_path, source_family
from .predict import score
from .rows import RunCase, build_case


class NoScoreableRows(UserInputError):
    """A runs file none of whose rows can be scored; ``skipped`` holds every row's reason (the
    command prints them all before its one-line error)."""

    def __init__(self, path: str, n_rows: int, skipped: list[dict]):
        self.skipped = skipped
        first = skipped[0] if skipped else None
        why = f"; row {first['row']}: {first['reason']}" if first else ""
        more = f" (and {len(skipped) - 1} more, listed above)" if len(skipped) > 1 else ""
        super().__init__("--runs", path, f"a CSV with at least one scoreable row (none of its {n_rows} rows "
                         f"is{why}{more})")


def _norm_column(name) -> str:
    return re.sub(r"[\s\-]+", "_", str(name if name is not None else "").strip().lower())


@dataclass
class Runs:
    """What a runs file holds: the scoreable cases, the skipped rows, the ignored columns."""
    path: str
    cases: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    ignored_columns: list = field(default_factory=list)
    total_rows: int = 0


def _skip_entry(i: int, line: int, row: dict, reason: str, column=None, value=None) -> dict:
    out = {"row": i, "line": line, "model_name": one_line(row.get("model_name") or "", 60),
           "family": source_family(row.get("source") or ""), "reason": one_line(reason, 400)}
    if column is not None:
        out["column"] = column
        out["value"] = one_line(value if value is not None else "", 80)
    return out


def _check_scoreable(case: RunCase) -> None:
    """The row goes through the cost model with neutral parameters and gives a finite, positive
    prediction; anything else is a Skip (so that no later fit or score meets it)."""
    try:
        rows = score([case], CostParams())
    except Exception as e:  # noqa: BLE001 - the reason is what the user needs, not the traceback
        raise Skip(f"the cost model cannot evaluate this row ({type(e).__name__}: "
                   f"{one_line(str(e).splitlines()[0] if str(e) else '', 160)})") from None
    pred = rows[0]["predicted"]
    if not (isinstance(pred, float) and math.isfinite(pred) and pred > 0):
        raise Skip(f"the cost model gives no finite positive prediction for this row ({pred!r})")


def _header_hint(header: list[str], none_found: bool) -> str:
    """Why a header lacks required columns, where the file shows it: NUL bytes, or (naming none
    of them) a blank first line or another delimiter."""
    line = ",".join(header)
    if "\x00" in line:
        return "; line 1 holds NUL bytes: a binary or UTF-16 file?"
    if not none_found:
        return ""
    if not line.strip():
        return "; line 1 is blank: the header must be the first line"
    for sep, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars")):
        if len(header) == 1 and sep in line:
            return f"; line 1 is separated by {name}: save it comma-separated"
    return ""


def load_runs(path: str | Path | None = None) -> Runs:
    """Read a runs CSV: every data row becomes a case or a skipped entry with its reason.
    Raises UserInputError (one line) for a file that cannot be read at all, lacks required
    columns, repeats a column, or has no scoreable row."""
    p = Path(path) if path else shipped_runs_path()
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise UserInputError("--runs", str(p), f"a readable CSV file ({e.strerror or e}), or the name reserved") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise UserInputError("--runs", str(p), f"a UTF-8 CSV file (line {line} has byte "
                                               f"0x{raw[e.start]:02x}: saved as Latin-1 or Windows-1252?)") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        header = []
    except csv.Error as e:
        raise UserInputError("--runs", str(p), f"a CSV file (header line: {e})") from None
    names = [_norm_column(h) for h in header]
    seen = set()
    for nm in names:
        if nm in COLUMNS and nm in seen:
            raise UserInputError("--runs", str(p), f"a CSV where each column appears once ({nm!r} is repeated)")
        seen.add(nm)
    missing = [c for c in REQUIRED_COLUMNS if c not in seen]
    unknown = [nm for nm in names if nm not in COLUMNS]
    if missing:
        hints = []
        for c in missing:
            near = difflib.get_close_matches(c, unknown, n=1, cutoff=TYPO_CUTOFF)
            if near:
                hints.append(f"{near[0]!r} for {c!r}?")
        raise UserInputError("--runs", str(p), "a CSV with the columns of published_runs.csv (missing: "
                             + ", ".join(missing) + (("; misspelt: " + " ".join(hints)) if hints else "") + ")"
                             + _header_hint(header, len(missing) == len(REQUIRED_COLUMNS)))
    typos = {}
    for nm in unknown:
        near = difflib.get_close_matches(nm, [c for c in COLUMNS if c not in seen], n=1, cutoff=TYPO_CUTOFF)
        if near:
            typos[nm] = near[0]
    runs = Runs(path=str(p), ignored_columns=[one_line(nm, 60) for nm in unknown if nm not in typos])
    i = 0
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            i += 1
            runs.skipped.append(_skip_entry(i, reader.line_num, {}, f"unreadable CSV record ({e})"))
            continue
        if not any(v.strip() for v in values):
            continue  # a blank line is not a row
        i += 1
        row = {nm: v for nm, v in zip(names, values) if nm in COLUMNS}
        try:
            if len(values) != len(names):
                raise Skip(f"the record has {len(values)} fields, the header {len(names)} "
                           "(a stray or missing comma shifts every column after it)")
            for nm, v in zip(names, values):
                if nm in typos and v.strip():
                    raise Skip(f"not a column of published_runs.csv; did you mean {typos[nm]!r}? "
                               "(its value would otherwise be replaced by an assumption)", nm, v.strip())
            case = build_case(i, row)
            case.line = reader.line_num
            _check_scoreable(case)
            runs.cases.append(case)
        except Skip as e:
            runs.skipped.append(_skip_entry(i, reader.line_num, row, str(e), e.column, e.value))
        except Exception as e:  # noqa: BLE001 - last resort: a row never ends the run with a traceback
            runs.skipped.append(_skip_entry(i, reader.line_num, row, f"could not be read ({type(e).__name__}: "
                                            f"{one_line(str(e).splitlines()[0] if str(e) else '', 160)})"))
    runs.total_rows = i
    if not runs.cases:
        raise NoScoreableRows(str(p), i, runs.skipped)
    return runs


def read_runs(path: str | Path | None = None) -> tuple[list[RunCase], list[dict]]:
    runs = load_runs(path)
    return runs.cases, runs.skipped
