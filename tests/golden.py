"""Golden outputs of the cost model: a fixed set of scenarios x configurations, evaluated and
pinned to ``tests/golden/costmodel.json``.

The configurations are stored in the file itself (drawn once from each scenario's legal space
with a seed, plus the production configuration), so adding a knob to the space does not change
which rows are checked; a new field takes its ``Config`` default when an old row is read.

Update only on purpose, and say why in the commit:

    .venv/bin/python tests/golden.py --write      # re-evaluate the stored rows
    .venv/bin/python tests/golden.py --write --redraw   # draw the rows again (new scenarios)
    .venv/bin/python tests/golden.py --diff       # what moved, per scenario and output
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

GOLDEN_FILE = Path(__file__).parent / "golden" / "costmodel.json"
ROWS_PER_SCENARIO = 24
DRAW_SEED = 20261126

# (model, cluster, overrides): presets, heterogeneous clusters (work shared by speed; one under TP overlap), fp8 and fp32 workloads,
# one regather policy per FSDP variant, a lossy long link
SCENARIOS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("llama3-405b", "campus-5bldg", ()),
    ("llama3-70b", "metro-2bldg", ()),
    ("llama3-8b", "region-pair", ("cluster.cross_region.loss_rate=1e-4",)),
    ("llama4-maverick", "metro-2bldg", ()),
    ("llama4-scout", "campus-5bldg", ("workload.fsdp_regather=never",)),
    ("mixtral-8x7b", "campus-5bldg", ("cluster.buildings.1.gpu=a100-80gb",)),
    ("llama3-405b", "campus-5bldg", ("cluster.buildings.3.gpu=a100-80gb", "cluster.buildings.4.gpu=a100-80gb")),
    ("deepseek-v3", "region-pair", ()),
    ("gpt3-175b", "single-building", ("workload.fsdp_regather=forward",)),
    ("llama3-70b", "llama3-24k", ("workload.precision=fp8",)),
    ("llama-mini", "local-2bldg", ("workload.global_batch_seqs=8", "workload.seq_len=64", "workload.precision=fp32",
                                    "workload.fsdp_regather=forward")),
    # a mixed-GPU cluster under TP comm overlap: the overlap budget is the shared GEMMs (seventeenth session)
    ("llama3-8b", "metro-2bldg", ("cluster.buildings.1.gpu=b200", "workload.tp_comm_overlap=true",
                                  "workload.seq_len=256")),
    # TP comm overlap's pieces (kernels.te_pieces) with the head's stage lighter (pipeline_layout ends;
    # eighteenth session)
    ("llama3-70b", "metro-2bldg", ("workload.tp_comm_overlap=true", "workload.pipeline_layout=ends")),
    # an eager (pytorch-class) MoE: torchtitan's atomic scatter-add un-permutation (twenty-fifth session)
    ("deepseek-v3", "campus-5bldg", ("workload.framework=pytorch",)),
)

OUTPUTS = ("iteration_time_s", "memory_per_gpu_bytes", "memory_deficit_bytes", "feasible", "mfu",
           "xb_bytes_per_step", "nvlink_bytes_per_gpu", "micro_batches")


def _scenario(model: str, cluster: str, overrides: tuple[str, ...]):
    from autotune.specs import build_scenario
    return build_scenario(model, cluster, overrides=list(overrides))


def _key(model: str, cluster: str, overrides) -> str:
    return " ".join([model, cluster, *overrides])


def draw_rows(scenario) -> list[dict]:
    """ROWS_PER_SCENARIO legal configurations with a seed, plus production when it exists."""
    from autotune.baselines import production_config
    from autotune.space import SearchSpace, config_at
    space = SearchSpace(scenario)
    b = space.sample(ROWS_PER_SCENARIO, seed=DRAW_SEED)
    rows = [config_at(b, i).model_dump() for i in range(len(b["tp"]))]
    prod = production_config(scenario, space)
    if prod is not None:
        rows.append(prod.model_dump())
    return rows


def evaluate_rows(scenario, rows: list[dict]) -> list[dict]:
    from autotune.costmodel import BREAKDOWN_KEYS, evaluate_batch
    from autotune.space import batch_from_configs
    out = evaluate_batch(scenario, batch_from_configs(rows))
    keys = OUTPUTS + tuple(BREAKDOWN_KEYS)
    return [{k: (bool(out[k][i]) if k == "feasible" else float(out[k][i])) for k in keys} for i in range(len(rows))]


def compute(stored: dict | None = None) -> dict:
    """{scenario key: {"rows": [config dicts], "outputs": [dicts]}}; rows from ``stored`` when given."""
    result = {}
    for model, cluster, overrides in SCENARIOS:
        key = _key(model, cluster, overrides)
        scen = _scenario(model, cluster, overrides)
        rows = stored[key]["rows"] if stored and key in stored else draw_rows(scen)
        result[key] = {"rows": rows, "outputs": evaluate_rows(scen, rows)}
    return result


def load() -> dict:
    return json.loads(GOLDEN_FILE.read_text())


def differences(stored: dict, fresh: dict, rel: float = 1e-9) -> list[str]:
    """One line per (scenario, row, output) that moved by more than ``rel``."""
    lines = []
    for key, st in stored.items():
        if key not in fresh:
            lines.append(f"{key}: scenario no longer evaluated")
            continue
        for i, (a, b) in enumerate(zip(st["outputs"], fresh[key]["outputs"])):
            for name, va in a.items():
                vb = b.get(name)
                if isinstance(va, bool) or vb is None:
                    if va != vb:
                        lines.append(f"{key} row {i} {name}: {va} -> {vb}")
                    continue
                if not math.isclose(va, vb, rel_tol=rel, abs_tol=1e-12):
                    change = (vb - va) / va * 100 if va else math.inf
                    lines.append(f"{key} row {i} {name}: {va:.6g} -> {vb:.6g} ({change:+.2f}%)")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="re-evaluate and write the golden file")
    ap.add_argument("--redraw", action="store_true", help="with --write: draw the rows again")
    ap.add_argument("--diff", action="store_true", help="print what moved against the stored file")
    a = ap.parse_args(argv)
    stored = load() if GOLDEN_FILE.exists() else None
    fresh = compute(None if a.redraw else stored)
    if a.diff and stored is not None:
        lines = differences(stored, fresh)
        print("\n".join(lines) if lines else "no change")
        moved = {ln.split(" row ")[0] for ln in lines}
        print(f"{len(lines)} values moved in {len(moved)} scenarios", file=sys.stderr)
    if a.write:
        GOLDEN_FILE.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN_FILE.write_text(json.dumps(fresh, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN_FILE} ({sum(len(v['rows']) for v in fresh.values())} rows)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
