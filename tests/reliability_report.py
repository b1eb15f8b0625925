"""Counts for the README's reliability table. Tests call ``record(kind, n)``; when the
environment variable AUTOTUNE_RELIABILITY_REPORT names a JSON file, the counts are added to it
(``python experiments/reliability_table.py`` runs the tests that way and prints the table)."""
from __future__ import annotations

import json
import os
from pathlib import Path


def record(kind: str, n: int = 1, **detail) -> None:
    path = os.environ.get("AUTOTUNE_RELIABILITY_REPORT")
    if not path:
        return
    p = Path(path)
    data = json.loads(p.read_text()) if p.exists() else {}
    entry = data.setdefault(kind, {"count": 0})
    entry["count"] += n
    for k, v in detail.items():
        entry[k] = entry.get(k, 0) + v if isinstance(v, (int, float)) else v
    p.write_text(json.dumps(data, indent=2, sort_keys=True))
