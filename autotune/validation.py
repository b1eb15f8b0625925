"""Validation of the cost model against measured runs (``published_runs.csv`` format).

Each CSV row becomes a single-building Scenario and a Config; the model's iteration time is
converted into the row's own metric with the row's own FLOP convention; every row is either
scored or skipped with a reason. Assumptions for unstated values are named constants here.
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from .costmodel.iteration import evaluate
from .costmodel.params import CostParams
from .errors import UserInputError
from .specs import Config, Scenario
from .specs.cluster import ClusterSpec, TierSpec
from .specs.model import ModelSpec
from .specs.presets import load_preset
from .specs.workload import WorkloadSpec

ASSUMED_VOCAB = 51200                 # Megatron GPT experiments' padded vocabulary
ASSUMED_FFN_MULTIPLE = 4              # GPT-style ffn_hidden = 4 h when not stated
ASSUMED_MICRO_BATCH = 1               # micro-batch when not stated
ASSUMED_DP_FLAVOUR = "ddp"            # when zero_or_fsdp is empty
ASSUMED_SCALE_OUT_LATENCY_s = 5e-6    # one-way NIC + switch latency of an InfiniBand/RoCE fabric
# The published runs' fabrics are non-blocking InfiniBand fat trees (Selene, DGX SuperPOD): one path
# per GPU, adaptive routing (modelled as packet spraying), lossless (credit-based flow control).
ASSUMED_INTERLEAVED_CHUNKS = 2        # "interleaved" with no vpp stated: the smallest legal v
PRE_FLASH_SOURCES = ("narayanan", "korthikanti")
"""Runs published before FlashAttention (Dao et al., May 2022) used Megatron's unfused attention."""
ALWAYS_RECOMPUTE_SOURCES = ("narayanan",)
"""Narayanan et al. 2021 sec. 5: activation recomputation is used in all runs (unless stated)."""
REQUIRED_COLUMNS = ("model_name", "n_layers", "hidden", "n_heads", "seq_len", "gpu_type", "n_gpus",
                    "tp", "pp", "dp", "global_batch_seqs", "measured_metric", "measured_value")
METRICS = ("iteration_time_s", "tokens_per_sec_per_gpu", "tflops_per_gpu", "mfu_pct")

_GPU_RULES = [(r"gb200", "gb200-nvl72"), (r"b200", "b200"), (r"h200", "h200"), (r"h800", "h800"),
              (r"h100", "h100-sxm"), (r"a100", "a100-80gb")]
_SCHEDULE_RULES = [(r"dualpipe", "dualpipev"), (r"zbv|zb-v", "zbv"), (r"zb-?2p", "zb2p"),
                   (r"zb-?1p|zb-?h1", "zb1p"), (r"interleav", "interleaved_1f1b"), (r"gpipe", "gpipe"),
                   (r"1f1b", "1f1b")]
_FLAVOUR_RULES = [(r"hsdp", "hsdp"), (r"zero-?3|fsdp", "fsdp"), (r"zero-?1|distributed optimizer", "zero1"),
                  (r"ddp|^none", "ddp")]


def shipped_runs_path() -> Path:
    return Path(str(resources.files("autotune.data").joinpath("published_runs.csv")))


def map_gpu(text: str) -> str | None:
    """A GPU name anywhere in the free text (first rule that matches wins)."""
    t = text.lower()
    for pat, name in _GPU_RULES:
        if re.search(pat, t):
            return name
    return None


def map_schedule(text: str, vpp: int) -> str:
    """Schedule from free text; a stated vpp > 1 means interleaved. Text naming two schedules
    ("1F1B/interleaved (not stated)") takes the first one named."""
    t = (text or "").lower().strip()
    if vpp > 1:
        return "interleaved_1f1b"
    best, best_pos = "1f1b", len(t) + 1
    for pat, name in _SCHEDULE_RULES:
        hit = re.search(pat, t)
        if hit and hit.start() < best_pos:
            best, best_pos = name, hit.start()
    return best


def map_flavour(text: str) -> str:
    t = (text or "").lower().strip()
    if not t:
        return ASSUMED_DP_FLAVOUR
    for pat, name in _FLAVOUR_RULES:
        if re.search(pat, t):
            return name
    return ASSUMED_DP_FLAVOUR


class Skip(Exception):
    pass


def _int(row, key, default=None):
    raw = (row.get(key) or "").strip()
    if raw == "":
        if default is None:
            raise Skip(f"{key} is empty")
        return default
    try:
        val = float(raw)
    except ValueError:
        raise Skip(f"{key}={raw!r} is not a number") from None
    if not math.isfinite(val) or val <= 0 or val != int(val):
        raise Skip(f"{key}={raw!r} is not a positive integer")
    return int(val)


@dataclass
class RunCase:
    row: int
    model_name: str
    source: str
    notes: str
    metric: str
    measured: float
    scenario: Scenario
    config: Config
    recompute_stated: bool
    micro_batch_stated: bool


def build_case(i: int, row: dict) -> RunCase:
    """Turn one CSV row into a scenario + config, or raise Skip with the reason."""
    metric = (row.get("measured_metric") or "").strip()
    if metric not in METRICS:
        raise Skip(f"measured_metric {metric!r} is not one of {', '.join(METRICS)}")
    try:
        measured = float(row.get("measured_value") or "nan")
    except ValueError:
        raise Skip(f"measured_value {row.get('measured_value')!r} is not a number") from None
    if not math.isfinite(measured) or measured <= 0:
        raise Skip("measured_value is missing or not positive")
    if not all((row.get(k) or "").strip() for k in ("n_layers", "hidden", "n_heads")):
        raise Skip("model architecture not given (n_layers/hidden/n_heads empty)")
    if not any((row.get(k) or "").strip() for k in ("tp", "pp", "dp")):
        raise Skip("parallel configuration not given (tp/pp/dp empty)")
    gpu = map_gpu(row.get("gpu_type") or "")
    if gpu is None:
        raise Skip(f"gpu_type {row.get('gpu_type')!r} matches no hardware preset")
    name = (row.get("model_name") or "").strip()
    L, h, heads = _int(row, "n_layers"), _int(row, "hidden"), _int(row, "n_heads")
    kv = _int(row, "n_kv_heads", heads)
    ffn = _int(row, "ffn_hidden", ASSUMED_FFN_MULTIPLE * h)
    vocab = _int(row, "vocab", ASSUMED_VOCAB)
    seq = _int(row, "seq_len")
    experts = _int(row, "moe_experts", 0) if (row.get("moe_experts") or "").strip() else 0
    topk = _int(row, "moe_topk", 1) if experts else 0
    act = "swiglu" if re.search(r"llama|mixtral|mistral", name.lower()) else "gelu"
    n = _int(row, "n_gpus")
    tp, pp, cp, ep = _int(row, "tp", 1), _int(row, "pp", 1), _int(row, "cp", 1), _int(row, "ep", 1)
    if n % (tp * pp * cp):
        raise Skip(f"n_gpus {n} is not divisible by tp*pp*cp = {tp * pp * cp}")
    dp = _int(row, "dp", n // (tp * pp * cp))
    if tp * pp * cp * dp != n:
        raise Skip(f"tp*pp*cp*dp = {tp * pp * cp * dp} does not match n_gpus {n}")
    vpp = _int(row, "vpp", 0)
    mb = _int(row, "micro_batch", ASSUMED_MICRO_BATCH)
    gb = _int(row, "global_batch_seqs")
    if gb % (dp * mb):
        raise Skip(f"global batch {gb} is not a multiple of dp*micro_batch = {dp * mb}")
    precision = (row.get("precision") or "bf16").strip().lower() or "bf16"
    if precision not in ("bf16", "fp16", "fp8"):
        raise Skip(f"precision {precision!r} is not bf16/fp16/fp8")
    hw = load_preset("hardware", gpu)
    try:
        model = ModelSpec(name=name or "row", n_layers=L, hidden=h, ffn_hidden=ffn, n_heads=heads,
                          n_kv_heads=kv, vocab=vocab, seq_len=seq, activation=act,
                          moe_experts=experts, moe_top_k=topk, moe_ffn_hidden=ffn if experts else 0)
        cluster = ClusterSpec(name="published-run", buildings=({"gpus": n, "gpu": hw},),
                              scale_out=TierSpec(bandwidth_Bps=hw.nic_bandwidth_Bps, n_paths=max(n, 1),
                                                 latency_s=ASSUMED_SCALE_OUT_LATENCY_s,
                                                 load_balancing="packet_spray", loss_recovery="sr"))
        src = (row.get("source") or "").lower()
        flash = not any(k in src for k in PRE_FLASH_SOURCES)
        scen = Scenario(model=model, workload=WorkloadSpec(global_batch_seqs=gb, seq_len=seq, precision=precision,
                                                           flash_attention=flash), cluster=cluster)
    except Exception as e:  # noqa: BLE001 - any spec error makes this row unusable; say why
        raise Skip(f"invalid row: {str(e).splitlines()[0]}") from None
    sched = map_schedule(row.get("pipeline_schedule") or "", vpp) if pp > 1 else "1f1b"
    chunks = (vpp or ASSUMED_INTERLEAVED_CHUNKS) if sched == "interleaved_1f1b" else (
        2 if sched in ("zbv", "dualpipev") else 1)
    flavour = map_flavour(row.get("zero_or_fsdp") or "")
    if dp * cp == 1:
        flavour = "ddp"
    rec = (row.get("recompute") or "").strip().lower()
    if not rec and any(k in (row.get("source") or "").lower() for k in ALWAYS_RECOMPUTE_SOURCES):
        rec = "full"
    cfg = Config(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, placement="dp_out", dp_flavour=flavour,
                 pp_schedule=sched, pp_chunks=chunks, micro_batch=mb,
                 recompute=rec if rec in ("none", "selective", "full") else "none")
    return RunCase(i, name, row.get("source") or "", row.get("notes") or "", metric, measured, scen, cfg,
                   rec in ("none", "selective", "full"), bool((row.get("micro_batch") or "").strip()))


TUNED_MICRO_BATCHES = (1, 2, 4, 8)


def resolve_unstated(case: RunCase, params: CostParams) -> Config:
    """Knobs a row does not state (recomputation, micro-batch) take the value a tuned run would
    use: the fastest that fits in memory under the model. A published benchmark is a tuned run;
    this is an assumption, applied the same way to every row."""
    recs = (case.config.recompute,) if case.recompute_stated else ("none", "selective", "full")
    gb, dp = case.scenario.global_batch_seqs, case.config.dp
    mbs = (case.config.micro_batch,) if case.micro_batch_stated else tuple(
        mb for mb in TUNED_MICRO_BATCHES if gb % (dp * mb) == 0) or (case.config.micro_batch,)
    best, best_t, fallback = None, math.inf, None
    for rec in recs:
        for mb in mbs:
            cfg = case.config.model_copy(update={"recompute": rec, "micro_batch": mb})
            e = evaluate(case.scenario, cfg, params)
            fallback = fallback or cfg
            if e.feasible and e.iteration_time_s < best_t:
                best, best_t = cfg, e.iteration_time_s
    if best is None:  # nothing fits: report the stated (or most frugal) setting, flagged infeasible
        return case.config.model_copy(update={"recompute": recs[-1], "micro_batch": mbs[0]})
    return best


def megatron_hfu_flops(scen: Scenario) -> float:
    """Narayanan et al. 2021 eq. (3): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) FLOPs per iteration,
    counting activation recomputation (the SC'21 tables use it)."""
    m = scen.model
    B, s, l, h, V = scen.global_batch_seqs, scen.seq_len, m.n_layers, m.hidden, m.vocab
    return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def predicted_metric(case: RunCase, iteration_s: float, model_flops: float) -> float:
    scen = case.scenario
    n = scen.n_gpus
    if case.metric == "iteration_time_s":
        return iteration_s
    if case.metric == "tokens_per_sec_per_gpu":
        return scen.global_batch_seqs * scen.seq_len / (iteration_s * n)
    if case.metric == "tflops_per_gpu":
        flops = megatron_hfu_flops(scen) if "narayanan" in case.source.lower() else model_flops
        return flops / (iteration_s * n) / 1e12
    peak = scen.cluster.buildings[0].gpu.peak_flops(scen.precision)
    return 100.0 * model_flops / (iteration_s * n * peak)


def read_runs(path: str | Path | None = None) -> tuple[list[RunCase], list[dict]]:
    p = Path(path) if path else shipped_runs_path()
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise UserInputError("--runs", str(p), f"a readable CSV file ({e.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserInputError("--runs", str(p), "a UTF-8 CSV file") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise UserInputError("--runs", str(p), "a CSV with the columns of published_runs.csv (missing: "
                             + ", ".join(missing) + ")")
    cases, skipped = [], []
    for i, row in enumerate(reader, start=1):
        try:
            cases.append(build_case(i, row))
        except Skip as e:
            skipped.append({"row": i, "model_name": (row.get("model_name") or "").strip(), "reason": str(e)})
    return cases, skipped


def score(cases, params: CostParams) -> list[dict]:
    from .costmodel.iteration import _scalar_row, iteration_formulas
    from .costmodel.xp import SCALAR
    rows = []
    for c in cases:
        cfg = resolve_unstated(c, params)
        out = iteration_formulas(c.scenario, _scalar_row(cfg), params, SCALAR)
        model_flops = out["mfu"] * out["iteration_time_s"] * c.scenario.n_gpus * \
            c.scenario.cluster.buildings[0].gpu.peak_flops(c.scenario.precision)
        pred = predicted_metric(c, out["iteration_time_s"], model_flops)
        rows.append({"row": c.row, "model_name": c.model_name, "measured_metric": c.metric,
                     "measured": c.measured, "predicted": pred,
                     "ape": 100.0 * abs(pred - c.measured) / c.measured,
                     "recompute": cfg.recompute, "micro_batch": cfg.micro_batch, "feasible": bool(out["feasible"]),
                     "source": c.source.split(";")[0][:60]})
    return rows


def validate(path=None, params: CostParams | None = None) -> dict:
    from .costmodel.params import default_params
    params = params or default_params()
    cases, skipped = read_runs(path)
    rows = score(cases, params)
    apes = np.array([r["ape"] for r in rows]) if rows else np.array([np.nan])
    return {"rows": rows, "skipped": skipped, "n": len(rows),
            "median_ape": float(np.median(apes)), "p90_ape": float(np.percentile(apes, 90)),
            "mean_ape": float(np.mean(apes)), "params": params.to_dict()}


FIT_BOUNDS = {
    "gemm_efficiency_max": (0.3, 0.95),
    "gemm_half_intensity_ridge_ratio": (0.01, 5.0),
    "attention_core_efficiency": (0.1, 0.9),
    "fp8_gemm_speedup_realised": (0.0, 1.0),
    "network_efficiency": (0.3, 1.0),
    "nvlink_efficiency": (0.3, 1.0),
}


def fit_params(path=None, start: CostParams | None = None) -> tuple[CostParams, dict]:
    """Least-squares fit of the named efficiency parameters on every scored row.

    Residual per row: log(predicted / measured) (scale-free across metrics), soft-L1 loss so a
    few rows with unstated settings cannot dominate. Returns the parameters and a fit report.
    """
    from scipy.optimize import least_squares
    start = start or CostParams()
    names = list(FIT_BOUNDS)
    cases, _ = read_runs(path)

    def residuals(x):
        params = start.with_values(**dict(zip(names, x)))
        return np.array([math.log(r["predicted"] / r["measured"]) for r in score(cases, params)])

    x0 = np.array([getattr(start, n) for n in names])
    lo = np.array([FIT_BOUNDS[n][0] for n in names])
    hi = np.array([FIT_BOUNDS[n][1] for n in names])
    res = least_squares(residuals, np.clip(x0, lo, hi), bounds=(lo, hi), loss="soft_l1", f_scale=0.1,
                        diff_step=1e-3, max_nfev=200)
    fitted = start.with_values(**dict(zip(names, res.x.tolist())))
    return fitted, {"n_rows": len(cases), "cost": float(res.cost), "nfev": int(res.nfev),
                    "success": bool(res.success)}


def write_params(params: CostParams, path: str | Path, report: dict) -> None:
    import yaml
    doc = {"params": {k: round(v, 6) for k, v in params.to_dict().items()},
           "fit": report,
           "note": "Fit by `autotune validate --fit` on the shipped published_runs.csv; "
                   "one set of parameters for all rows (no per-row constants)."}
    Path(path).write_text(yaml.safe_dump(doc, sort_keys=False))
