"""``autotune kernels``: the cost model's kernel terms against kernels measured on one GPU.

The data (``autotune/data/h100``, see its README; ``autotune/data/h200``, the same scripts on an
H200, never fit on, with TP comm overlap's chunked GEMMs) are single-GPU timings of the kernels a
training step is made of: dense GEMMs at TP-sharded layer shapes (bf16 and fp8), small-expert
batched and grouped GEMMs, causal attention forward and backward, memory-bound passes, and
whole eager-PyTorch layers. Each measured case is predicted with the very functions
``iteration_formulas`` uses (``costmodel.kernels``), so an error here is an error of the model.

Two parameter sets are scored: the shipped calibration (fit on published training runs, with the
GEMM and attention levels and shapes held at the H100 kernels' (``validation.held``; Hopper's
generation factor 1.0) and framework overheads in the framework factors, which the kernels here
do not carry), and ``--fit``: the kernel parameters fit
on a seeded half of the measured shapes and scored on the other half only (``split``). For the
memory-bound kinds the "prediction" is the measured bytes at the HBM rate the model charges, so
their error is the measured rate over that rate; the model's bytes per token are not tested.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from .costmodel import constants as C
from .costmodel.kernels import (attention_core_fwd_time_s, eager_gated_activation_time_s, expert_block_time_s,
                                gemm_out_weight, gemm_time_s, memory_bound_time_s, moe_token_move_time_s,
                                split_gemm_ratio)
from .costmodel.params import CostParams, default_params
from .errors import UserInputError
from .validation.columns import map_gpu, one_line
from .specs.presets import load_preset, preset_names

GPU_PRESET = "h100-sxm"
SWIGLU_MATS = 3.0            # gate, up, down: the measured MLPs and expert blocks are SwiGLU
FIT_NAMES = ("gemm_efficiency_max", "gemm_half_intensity_ridge_ratio", "attention_core_efficiency",
             "attention_head_dim_half", "attention_seq_half", "attention_backward_time_ratio",
             "fp8_gemm_speedup_realised")
FIT_BOUNDS = {"gemm_efficiency_max": (0.3, 1.0), "gemm_half_intensity_ridge_ratio": (1e-3, 5.0),
              "gemm_knee_sharpness": (1.0, 8.0),
              "attention_core_efficiency": (0.1, 1.0), "attention_backward_time_ratio": (1.0, 8.0),
              "attention_head_dim_half": (0.0, 512.0), "attention_seq_half": (0.0, 8192.0),
              "fp8_gemm_speedup_realised": (0.0, 1.0)}
NOT_MODELLED: dict[str, str] = {}
"""Measured kinds with no cost-model term (none since MoE permutation is charged)."""


@dataclass(frozen=True)
class Gpu:
    peak_bf16: float
    peak_fp8: float
    hbm_Bps: float
    compute_capability: float = 9.0

    def bf16(self, p: CostParams) -> float:
        """Sustained bf16 peak as the cost model sets it (``scenario_consts.generation_efficiency``)."""
        from .costmodel.scenario_consts import generation_efficiency
        return self.peak_bf16 * generation_efficiency(p, self)

    @property
    def ridge(self) -> float:
        """Roofline ridge point of the bf16 peak (FLOP/byte), as the cost model uses it."""
        return self.peak_bf16 / self.hbm_Bps

    def peak_lin(self, dtype: str, p: CostParams) -> float:
        """GEMM peak as the cost model sets it: fp8 realises ``fp8_gemm_speedup_realised`` of
        the extra fp8 peak (``scenario_consts``)."""
        if dtype == "fp8":
            return self.bf16(p) * (1.0 + (self.peak_fp8 / self.peak_bf16 - 1.0) * p.fp8_gemm_speedup_realised)
        return self.bf16(p)


def gpu(preset: str = GPU_PRESET) -> Gpu:
    g = load_preset("hardware", preset)
    return Gpu(g.peak_flops_bf16, g.peak_flops_fp8, g.hbm_bandwidth_Bps, g.compute_capability)


def gpu_preset_of(folder, preset: str | None) -> str:
    """The hardware preset the measurements are scored against: the GPU named in the folder's
    gpu_info.txt (the measuring scripts write it), else ``preset`` (``--gpu``), else the H100; a
    ``preset`` that contradicts the file is refused (one GPU's measurements, another's peaks)."""
    f = folder.joinpath("gpu_info.txt") if hasattr(folder, "joinpath") else Path(folder) / "gpu_info.txt"
    try:
        text = f.read_text()
    except FileNotFoundError:
        return preset or GPU_PRESET
    except (OSError, UnicodeDecodeError) as exc:
        if preset:           # the file cannot say otherwise
            return preset
        raise UserInputError("--data", str(f), "a readable UTF-8 gpu_info.txt naming the GPU, or --gpu PRESET "
                             f"({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
    name = map_gpu(text)
    if preset and name and preset != name:
        raise UserInputError("--gpu", preset, f"{name}, the GPU {f.name} names (or leave --gpu out)")
    if not (preset or name):
        raise UserInputError("--gpu", "(not given)", f"a hardware preset: {f.name} names no known GPU "
                             f"({one_line(text, 60)!r}); name its preset with --gpu")
    return preset or name


SHIPPED_DATA = ("h100", "h200")     # measurement folders shipped in autotune/data (--data h200 names one)


def data_dir(path: str | None = None):
    """The measurements' folder: a shipped one by its name (``h100``, the default, or ``h200``:
    the name wins over a local folder of that name, which ``./h200`` reaches), else a path."""
    if path is None or path in SHIPPED_DATA:
        return resources.files("autotune.data").joinpath(path or "h100")
    d = Path(path)
    if not d.is_dir():
        raise UserInputError("--data", path, "a folder holding gpu_kernels.csv and gpu_layers.csv, or a shipped "
                             "one: " + ", ".join(SHIPPED_DATA))
    return d


def _num(row: dict, col: str) -> float:
    """A finite number >= 0 from ``col`` (> 0 for ``ms``), else ValueError naming column and value."""
    raw = row.get(col)
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"column {col}: got {raw!r}; allowed: a number") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and col == "ms"):
        raise ValueError(f"column {col}: got {raw!r}; allowed: a finite number >= 0 (ms > 0)")
    return v


CHUNKS_FILE = "gpu_gemm_chunks.csv"
"""Dense GEMMs at M = 128-8,192 and the tp chunks of TP comm overlap (experiments/h100/gpu_gemm_chunks.py)."""


def read_cases(folder, skipped: list[str] | None = None, g: Gpu | None = None) -> list[dict]:
    """Kernel and layer cases, each with ``kind``, ``ms`` measured and its shape columns. A row
    the model cannot be scored on (a missing or unparseable number, a zero shape) is left out,
    with a one-line reason appended to ``skipped``, as is a kind the model has no term for (``KINDS``)
    or a data type it has no peak for. A column that every row of a kind needs and the file lacks
    is a UserInputError naming it."""
    cases = []
    for name, layer in (("gpu_kernels.csv", False), ("gpu_layers.csv", True), (CHUNKS_FILE, False)):
        f = folder.joinpath(name) if hasattr(folder, "joinpath") else Path(folder) / name
        try:
            text = f.read_text()
        except FileNotFoundError as exc:
            if name == CHUNKS_FILE:        # optional: only folders measured with gpu_gemm_chunks.py have it
                continue
            raise UserInputError("--data", str(f), f"a readable {name} ({exc.strerror})") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UserInputError("--data", str(f), f"a readable UTF-8 {name} "
                                 f"({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
        for i, row in enumerate(csv.DictReader(text.splitlines()), start=2):
            if row.get("error"):
                continue
            if layer:
                for kind, col in (("layer_fwd", "fwd_ms"), ("layer_fwd_bwd", "fwd_bwd_ms")):
                    cases.append(dict(row, kind=kind, ms=row.get(col), dtype="bf16", line=f"{name}:{i}"))
            else:
                cases.append(dict(row, line=f"{name}:{i}"))
    g, p = g or gpu(), default_params()
    good, missing = [], {}
    for r in cases:
        try:
            kind, dtype = r.get("kind"), r.get("dtype") or "bf16"
            if kind not in KINDS:
                raise ValueError(f"kind {kind!r}: none the model has a term for ({', '.join(KINDS)})")
            if dtype not in ("bf16", "fp8") or (dtype == "fp8" and kind not in ("gemm", "gemm_chunks")):
                raise ValueError(f"dtype {dtype!r}: bf16, or fp8 for gemm and gemm_chunks")
            _num(r, "ms")
            t = predict_s(r, g, p)
            if t is not None and not (math.isfinite(t) and t > 0):
                raise ValueError(f"predicted time {t!r}: a shape column is 0")
        except (ValueError, ZeroDivisionError) as exc:
            why = "a shape column is 0" if isinstance(exc, ZeroDivisionError) else str(exc)
            if why.endswith("got None; allowed: a number"):     # the column is absent from the file
                missing.setdefault((r["line"].split(":")[0], r.get("kind")), why.split(":")[0])
            if skipped is not None:
                skipped.append(f"{r['line']} ({r.get('kind')}): {why}")
            continue
        good.append(r)
    for file, kind in missing:     # a column every row of a kind needs, absent: the file's fault, not a row's
        if not any(r["line"].split(":")[0] == file and r.get("kind") == kind for r in good):
            raise UserInputError("--data", str(Path(str(folder)) / file),
                                 f"a file with the {missing[file, kind]} its {kind} rows need")
    return good


def _layer_fwd_parts(r: dict, g: Gpu, p: CostParams) -> tuple[float, float, float]:
    """(linear, attention core, memory-bound) forward seconds of one measured layer shard, as
    ``iteration_formulas`` builds a layer: QKV and output projections, the SwiGLU MLP or the
    routed experts (uniform routing, as measured: no imbalance factor) plus the router GEMM,
    causal flash attention, and the elementwise traffic per token and hidden unit."""
    S, h, heads, kv, hd, ffn = (_num(r, c) for c in ("seq", "hidden", "heads", "kv_heads", "head_dim", "ffn"))
    E, El, k = (_num(r, c) for c in ("experts", "local_experts", "topk"))
    peak, ridge = g.bf16(p), g.ridge
    lin = gemm_time_s(S, h, (heads + 2 * kv) * hd, peak, ridge, p) + gemm_time_s(S, heads * hd, h, peak, ridge, p)
    perm = 0.0
    if E > 0:
        lin += expert_block_time_s(S * k / E, h, ffn, SWIGLU_MATS, El, peak, ridge, p)
        lin += 2.0 * S * h * E / (peak * p.gemm_efficiency_max)
        # the local experts' S k El / E routed copies: index_select in, index_add_ back (and the
        # same two kernels swapped in the backward)
        local = S * k * El / E * h
        perm = moe_token_move_time_s(local, g.hbm_Bps, False) + moe_token_move_time_s(local, g.hbm_Bps, True)
    else:
        lin += gemm_time_s(S, h, 2 * ffn, peak, ridge, p) + gemm_time_s(S, ffn, h, peak, ridge, p)
    core = attention_core_fwd_time_s(S, C.CAUSAL_ATTENTION_WORK_FRACTION * S, 2 * heads * hd, peak, p, hd, S)
    elem = memory_bound_time_s(C.ELEMENTWISE_TRAFFIC_BYTES_PER_TOKEN_HIDDEN * S * h, g.hbm_Bps) + perm
    return lin, core, elem


KINDS = ("gemm", "gemm_chunks", "expert_bmm", "expert_grouped_mm_up", "attn_fwd", "attn_fwd_bwd", "moe_permute",
         "moe_unpermute", "rmsnorm_fwd", "swiglu_fwd", "copy", "layer_fwd", "layer_fwd_bwd")
"""The kinds ``predict_s`` has a term for; a row of another kind is skipped, with its reason."""


def predict_s(r: dict, g: Gpu, p: CostParams) -> float | None:
    """Seconds the cost model charges for case ``r``; None where it has no term for the kind."""
    kind = r.get("kind")
    if kind == "gemm":
        return gemm_time_s(_num(r, "M"), _num(r, "K"), _num(r, "N"), g.peak_lin(r.get("dtype"), p), g.ridge, p,
                           gemm_out_weight(r.get("dtype")))
    if kind == "gemm_chunks":
        # TP comm overlap's split as terms.compute_terms charges it (attn_split): the whole GEMM
        # times what cutting it into chunks pieces of M / chunks rows costs (kernels.split_gemm_ratio)
        c = _num(r, "chunks")
        if c < 1 or c != int(c):
            raise ValueError(f"column chunks: got {r.get('chunks')!r}; allowed: a whole number >= 1")
        M, K, N, w = _num(r, "M"), _num(r, "K"), _num(r, "N"), gemm_out_weight(r.get("dtype"))
        return gemm_time_s(M, K, N, g.peak_lin(r.get("dtype"), p), g.ridge, p, w) * split_gemm_ratio(
            [(K, N, c)], M, g.ridge, p, w)
    if kind == "expert_bmm":
        return expert_block_time_s(_num(r, "T"), _num(r, "K"), _num(r, "N"), SWIGLU_MATS, _num(r, "E"),
                                   g.bf16(p), g.ridge, p)
    if kind == "expert_grouped_mm_up":
        return _num(r, "E") * gemm_time_s(_num(r, "T"), _num(r, "K"), 2 * _num(r, "N"), g.bf16(p), g.ridge, p)
    if kind in ("attn_fwd", "attn_fwd_bwd"):
        # causal: S/2 keys per query; d_qk = d_v = head_dim; the backward is
        # attention_backward_time_ratio x the forward
        S = _num(r, "S")
        fwd = attention_core_fwd_time_s(_num(r, "B") * S, C.CAUSAL_ATTENTION_WORK_FRACTION * S,
                                        2 * _num(r, "heads") * _num(r, "head_dim"), g.bf16(p), p,
                                        _num(r, "head_dim"), S)
        return fwd if kind == "attn_fwd" else (1.0 + p.attention_backward_time_ratio) * fwd
    if kind in ("moe_permute", "moe_unpermute"):
        # the permutation: half of MOE_PERMUTE_TRAFFIC_BYTES_PER_ROUTED_ELEMENT (read + write every
        # routed copy); the un-permutation as measured, eager index_add_ (an atomic scatter-add)
        elems = _num(r, "tokens") * _num(r, "topk") * _num(r, "K")
        return moe_token_move_time_s(elems, g.hbm_Bps, kind == "moe_unpermute")
    if kind == "rmsnorm_fwd":
        # two reads (sum of squares, scaling) and one write of every element
        return memory_bound_time_s(C.RMSNORM_TRAFFIC_BYTES_PER_ELEMENT * _num(r, "tokens") * _num(r, "K"), g.hbm_Bps)
    if kind == "swiglu_fwd":
        # F.silu(u[:, :K]) * u[:, K:]: two eager kernels over strided halves of u
        return eager_gated_activation_time_s(_num(r, "tokens") * _num(r, "K"), g.hbm_Bps)
    if kind == "copy":
        # the measured bytes moved (gbps x time), at the model's rate for memory-bound work
        return memory_bound_time_s(_num(r, "gbps") * 1e9 * _num(r, "ms") * 1e-3, g.hbm_Bps)
    if kind in ("layer_fwd", "layer_fwd_bwd"):
        lin, core, elem = _layer_fwd_parts(r, g, p)
        # backward: input and weight gradients (2 x linear), the core's backward, the elementwise again
        return lin + core + elem if kind == "layer_fwd" else 3 * lin + (1.0 + p.attention_backward_time_ratio) * core + 2 * elem
    return None


def kind_of(r: dict) -> str:
    """The reporting kind: GEMMs split by data type (fp8 runs at its own realised peak)."""
    if r.get("kind") == "gemm":
        return f"gemm_{r.get('dtype') or 'bf16'}"
    if r.get("kind") == "gemm_chunks" and (r.get("dtype") or "bf16") != "bf16":
        return f"gemm_chunks_{r.get('dtype')}"
    return str(r.get("kind"))


def _stats(errs: list[float]) -> dict:
    a = np.abs(np.asarray(errs))
    return {"n": len(errs), "median_abs_err_pct": float(np.median(a)), "p90_abs_err_pct": float(np.percentile(a, 90)),
            "median_signed_err_pct": float(np.median(errs)), "max_abs_err_pct": float(a.max())}


def score(cases: list[dict], p: CostParams, g: Gpu) -> dict:
    """Per kind: error of predicted vs measured time, in % of measured (+: model slower)."""
    by_kind: dict[str, list[float]] = {}
    for r in cases:
        t = predict_s(r, g, p)
        if t is not None:
            by_kind.setdefault(kind_of(r), []).append(100.0 * (t / (_num(r, "ms") * 1e-3) - 1.0))
    return {kind: _stats(e) for kind, e in sorted(by_kind.items())}


LAUNCH_BOUND_CHUNK_MS = 0.04
"""Chunks faster than this (ms each) are left out of ``split_ratios``: the measuring script
launches them from a Python loop at about 18 us a launch (``data/h200/README.md``), so below
about twice that the GPU waits on the host and the ratio measures the launches."""


def split_ratios(cases: list[dict], p: CostParams, g: Gpu) -> dict | None:
    """TP comm overlap's split term alone: the chunks' time over the whole GEMM's, predicted
    (``kernels.split_gemm_ratio``) against measured, for each ``gemm_chunks`` case whose whole
    GEMM (same dtype, M, K, N) was measured too and whose chunks take at least
    ``LAUNCH_BOUND_CHUNK_MS`` each. Error in % of the measured ratio; None without such cases."""
    whole = {(r.get("dtype") or "bf16", _num(r, "M"), _num(r, "K"), _num(r, "N")): _num(r, "ms")
             for r in cases if r.get("kind") == "gemm"}
    errs = []
    for r in cases:
        if r.get("kind") != "gemm_chunks":
            continue
        dtype, M, K, N, c, ms = r.get("dtype") or "bf16", _num(r, "M"), _num(r, "K"), _num(r, "N"), _num(r, "chunks"), _num(r, "ms")
        w = whole.get((dtype, M, K, N))
        if w is None or ms / c < LAUNCH_BOUND_CHUNK_MS:
            continue
        ratio = split_gemm_ratio([(K, N, c)], M, g.ridge, p, gemm_out_weight(dtype))
        errs.append(100.0 * (ratio / (ms / w) - 1.0))
    return dict(_stats(errs), min_chunk_ms=LAUNCH_BOUND_CHUNK_MS) if errs else None


SPLIT_SEED = 0


def shape_group(r: dict) -> tuple:
    """Cases that share a shape: a batched expert GEMM and its grouped up-projection, attention
    forward and forward+backward, a layer's forward and forward+backward. They go to the same side
    of the split, so no held-out case has its shape in the fit."""
    kind = r.get("kind")
    cols = {"gemm": ("dtype", "M", "K", "N"), "gemm_chunks": ("dtype", "M", "K", "N", "chunks"),
            "expert_bmm": ("E", "T", "K", "N"),
            "expert_grouped_mm_up": ("E", "T", "K", "N"), "attn_fwd": ("B", "S", "heads", "kv_heads", "head_dim"),
            "attn_fwd_bwd": ("B", "S", "heads", "kv_heads", "head_dim"), "layer_fwd": ("case", "seq"),
            "layer_fwd_bwd": ("case", "seq")}.get(kind, ("kind", "tokens", "K", "topk"))
    family = {"expert_grouped_mm_up": "expert_bmm", "attn_fwd_bwd": "attn_fwd",
              "layer_fwd_bwd": "layer_fwd"}.get(kind, kind)
    return (family, *(str(r.get(c)) for c in cols))


def split(cases: list[dict], seed: int = SPLIT_SEED) -> tuple[list[dict], list[dict]]:
    """(fit, held-out): a seeded random half of each family's shapes (``shape_group``) to fit on,
    the rest held out. Whole layers still contain GEMM shapes of the fit half."""
    rng = np.random.default_rng(seed)
    groups: dict[tuple, list[dict]] = {}
    for r in cases:
        groups.setdefault(shape_group(r), []).append(r)
    fit_keys: set = set()
    for family in sorted({g[0] for g in groups}):
        keys = sorted(g for g in groups if g[0] == family)
        order = rng.permutation(len(keys))
        fit_keys |= {keys[i] for i in order[:len(keys) // 2]}
    fit = [r for r in cases if shape_group(r) in fit_keys]
    held = [r for r in cases if shape_group(r) not in fit_keys]
    return fit, held


KNEE = "gemm_knee_sharpness"
"""Fitted only on request (``autotune kernels --fit --free-knee``): the shipped model holds it at
1 (validation.held.KERNEL_SHAPES)."""


def fit_kernel_params(cases: list[dict], g: Gpu, start: CostParams, free_knee: bool = False) -> CostParams:
    """Least squares on log(predicted / measured) over the kernels the fitted parameters govern
    (GEMMs, expert GEMMs, attention); soft-L1 loss so no single case dominates. The GEMM knee's
    sharpness is held at ``start``'s unless ``free_knee``."""
    from scipy.optimize import least_squares
    used = [r for r in cases if r.get("kind") in ("gemm", "expert_bmm", "expert_grouped_mm_up", "attn_fwd", "attn_fwd_bwd")]
    names = FIT_NAMES + ((KNEE,) if free_knee else ())
    lo = np.array([FIT_BOUNDS[n][0] for n in names])
    hi = np.array([FIT_BOUNDS[n][1] for n in names])

    def params(x) -> CostParams:
        return start.with_values(**dict(zip(names, map(float, x))))

    def residuals(x):
        p = params(x)
        return np.array([math.log(predict_s(r, g, p) / (_num(r, "ms") * 1e-3)) for r in used])
    x0 = np.clip([getattr(start, n) for n in names], lo, hi)
    res = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    return params(res.x)


def run(path: str | None = None, fit: bool = False, free_knee: bool = False, preset: str | None = None) -> dict:
    folder = data_dir(path)
    name = gpu_preset_of(folder, preset)
    if name not in preset_names("hardware"):
        raise UserInputError("--gpu", name, "a hardware preset: " + ", ".join(preset_names("hardware")))
    g = gpu(name)
    skipped: list[str] = []
    cases = read_cases(folder, skipped, g)
    if not any(predict_s(r, g, default_params()) is not None for r in cases):
        raise UserInputError("--data", path, "a gpu_kernels.csv / gpu_layers.csv with at least one scoreable case"
                             + (f" (skipped: {skipped[0]}{' ...' if len(skipped) > 1 else ''})" if skipped else ""))
    shipped = default_params()
    out = {"gpu": name, "cases": len(cases), "skipped": skipped,
           "shipped": {"params": shipped.to_dict(), "by_kind": score(cases, shipped, g),
                       "split_ratio": split_ratios(cases, shipped, g)},
           "not_modelled": NOT_MODELLED}
    if fit:
        fit_cases, held = split(cases)
        p = fit_kernel_params(fit_cases, g, shipped, free_knee)
        out["kernel_fit"] = {"params": {n: getattr(p, n) for n in FIT_NAMES + (KNEE,)}, "fit_cases": len(fit_cases),
                             "held_out_cases": len(held), "by_kind": score(held, p, g)}
    return out
