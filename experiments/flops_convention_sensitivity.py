"""How a FLOP-counting convention moves the rows that report TFLOP/s or MFU: score the shipped
published runs as they are, then a copy with ``flops_convention`` of the chosen rows set to
another value, with the shipped calibration (no fit), and print each chosen row's prediction,
their median error and their configuration groups' Spearman rho both ways.

A sensitivity, not a choice: a row's convention is what its source counted; this shows what is at
stake where the source does not say (README, twenty-fourth session: Liu et al.'s context-scaling
rows, 282-289). Read top to bottom; about 5 s on a 2-core machine.

    .venv/bin/python experiments/flops_convention_sensitivity.py --rows 282-289 --convention "model causal"
"""
from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autotune.validation import validate
from autotune.validation.columns import shipped_runs_path


@dataclass(frozen=True)
class Args:
    rows: str = "282-289"
    """Row numbers as `autotune validate` prints them (first data row = 1): 'A-B' or 'A,B,C'."""
    convention: str = "model causal"
    """The flops_convention cell the copy gives those rows (model, model causal, hardware)."""


def row_numbers(text: str) -> list[int]:
    if "-" in text:
        a, b = (int(x) for x in text.split("-"))
        return list(range(a, b + 1))
    return [int(x) for x in text.split(",")]


def groups_of(d: dict, rows: set) -> dict:
    return {(g["family"], g["model"]): g["spearman"] for g in d["rank_correlation"]["groups"] if rows & set(g["rows"])}


ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--rows", default=Args.rows)
ap.add_argument("--convention", default=Args.convention)
args = Args(**vars(ap.parse_args()))
print(args)
chosen = row_numbers(args.rows)

src = shipped_runs_path()
with open(src, newline="") as f:
    table = list(csv.DictReader(f))
for n in chosen:
    table[n - 1]["flops_convention"] = args.convention
with tempfile.TemporaryDirectory() as tmp:
    copy = Path(tmp) / "runs.csv"
    with open(copy, "w", newline="") as f:
        w = csv.DictWriter(f, list(table[0]))
        w.writeheader()
        w.writerows(table)
    shipped, changed = validate(src), validate(copy)

a = {r["row"]: r for r in shipped["rows"]}
b = {r["row"]: r for r in changed["rows"]}
print(f"{'row':>4} {'measured':>9} {'as shipped':>11} {args.convention:>13}")
for n in chosen:
    print(f"{n:>4} {a[n]['measured']:>9.1f} {a[n]['predicted']:>11.1f} {b[n]['predicted']:>13.1f}")
print(f"median APE of these rows: {statistics.median(a[n]['ape'] for n in chosen):.1f}% as shipped, "
      f"{statistics.median(b[n]['ape'] for n in chosen):.1f}% with {args.convention!r}")
ga, gb = groups_of(shipped, set(chosen)), groups_of(changed, set(chosen))
for key in ga:
    print(f"Spearman of {key[0]} / {key[1]}: {ga[key]:.2f} as shipped, {gb.get(key, float('nan')):.2f}")
