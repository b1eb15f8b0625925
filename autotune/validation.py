"""Validation of the cost model against measured runs (``published_runs.csv`` format).

Each CSV row becomes a single-building Scenario and a Config; the model's iteration time is
converted into the row's own metric with the row's own FLOP convention; every row is either
scored or skipped with a one-line reason naming the row, the column and the value.
Assumptions for unstated values are named constants here.

Three ways to score (``autotune validate``):

* in-sample: the shipped calibration (or ``--fit``: parameters fit on these very rows);
* leave-one-source-family-out (``--loso``): rows are grouped into source families
  (:func:`source_family`); for each family the parameters are fit (:func:`fit_params`) on every
  *other* family's rows and only the held-out family's rows are scored with them, so each row
  is scored exactly once by a fit that never saw its family;
* rank correlation (:func:`rank_correlations`): within a *configuration group* (rows of one
  source family with the same model architecture, GPU type and metric, at least
  :data:`RANK_MIN_ROWS` rows and at least two parallel layouts), the Spearman correlation
  between predicted and measured values: does the model order the configurations as the
  measurements do.

Reading a file (``--runs``): column names are matched after trimming, lower-casing and turning
spaces and hyphens into underscores. An unknown column is ignored and listed, except one that
looks like a misspelling of a known column (:data:`TYPO_CUTOFF`): a row with a value there is
skipped, since that value would otherwise be silently replaced by an assumption. Values that do
not parse, impossible architectures or parallel layouts, and anything else that keeps a row
from being scored skip that row only; a file with no scoreable row is a one-line error.
"""
from __future__ import annotations

import csv
import difflib
import io
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
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
MAX_SCALE_OUT_PATHS = 1 << 16         # TierSpec's limit on equal-cost paths (reached only past 65,536 GPUs)
ASSUMED_INTERLEAVED_CHUNKS = 2        # "interleaved" with no vpp stated: the smallest legal v
PRE_FLASH_SOURCES = ("narayanan", "korthikanti")
"""Runs published before FlashAttention (Dao et al., May 2022) used Megatron's unfused attention."""
ALWAYS_RECOMPUTE_SOURCES = ("narayanan",)
"""Narayanan et al. 2021 sec. 5: activation recomputation is used in all runs (unless stated)."""
COLUMNS = ("source", "model_name", "params_b", "n_layers", "hidden", "ffn_hidden", "n_heads", "n_kv_heads",
           "vocab", "seq_len", "moe_experts", "moe_topk", "gpu_type", "n_gpus", "tp", "pp", "dp", "cp", "ep",
           "vpp", "micro_batch", "global_batch_seqs", "recompute", "precision", "zero_or_fsdp",
           "pipeline_schedule", "measured_metric", "measured_value", "notes")
"""The columns of published_runs.csv. ``source``, ``params_b`` and ``notes`` are informational:
``source`` names the row's source family; none of the three is parsed as a number."""
REQUIRED_COLUMNS = ("model_name", "n_layers", "hidden", "n_heads", "seq_len", "gpu_type", "n_gpus",
                    "tp", "pp", "dp", "global_batch_seqs", "measured_metric", "measured_value")
METRICS = ("iteration_time_s", "tokens_per_sec_per_gpu", "tflops_per_gpu", "mfu_pct")
TYPO_CUTOFF = 0.8
"""An unknown column whose name is at least this similar (difflib ratio) to a known column that
the file lacks is taken as a misspelling of it: rows with a value there are skipped."""
RECOMPUTE_VALUES = ("none", "selective", "full")

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


def _match_schedule(text: str) -> str | None:
    """The schedule named first in the free text, or None when it names none."""
    t = (text or "").lower().strip()
    best, best_pos = None, len(t) + 1
    for pat, name in _SCHEDULE_RULES:
        hit = re.search(pat, t)
        if hit and hit.start() < best_pos:
            best, best_pos = name, hit.start()
    return best


def map_schedule(text: str, vpp: int) -> str:
    """Schedule from free text; a stated vpp > 1 means interleaved. Text naming two schedules
    ("1F1B/interleaved (not stated)") takes the first one named."""
    if vpp > 1:
        return "interleaved_1f1b"
    return _match_schedule(text) or "1f1b"


def _match_flavour(text: str) -> str | None:
    t = (text or "").lower().strip()
    for pat, name in _FLAVOUR_RULES:
        if re.search(pat, t):
            return name
    return None


def map_flavour(text: str) -> str:
    t = (text or "").lower().strip()
    if not t:
        return ASSUMED_DP_FLAVOUR
    return _match_flavour(t) or ASSUMED_DP_FLAVOUR


_GITHUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+")
_PAPER_CUT = re.compile(r"\s+(?:arXiv\b|Tables?\b|Fig(?:ure)?s?\b|Sec(?:tion)?s?\b|\()")
NO_SOURCE_FAMILY = "(no source)"


def source_family(source: str) -> str:
    """The source family of a row: the paper or repository its numbers come from.

    Rule (applied to the ``source`` text with whitespace collapsed, up to its first ';'; at most
    80 characters):
    if it starts with a GitHub ``owner/repo`` the family is that ``owner/repo``
    (every document of one repository is one family: its README, its docs pages); otherwise it
    is a paper citation and the family is the text before the first ``arXiv``, ``Table(s)``,
    ``Fig(ure)``, ``Sec(tion)`` or ``(`` (authors and venue: every table of one paper is one
    family). Families compare case-insensitively. An empty source is its own family.
    """
    head = one_line(source or "", 100_000).split(";")[0].strip()
    if not head:
        return NO_SOURCE_FAMILY
    first = head.split(" ")[0]
    if _GITHUB_REPO.fullmatch(first):
        return first[:80]
    return (_PAPER_CUT.split(head, maxsplit=1)[0].strip(" ,:") or head)[:80]


def one_line(text, limit: int = 80) -> str:
    """Printable, single-line, bounded: what a reason or a name may show of a cell."""
    s = "".join(ch if ch.isprintable() else " " for ch in str(text))
    s = " ".join(s.split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


def _show(value: str) -> str:
    """A cell's value as a reason quotes it: repr (escapes control characters), bounded."""
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


class Skip(Exception):
    """A row that cannot be scored; the message names the column and the value."""

    def __init__(self, reason: str, column: str | None = None, value: str | None = None):
        self.column, self.value = column, value
        super().__init__(f"{column}={_show(value)}: {reason}" if column is not None else reason)


def _cell(row: dict, key: str) -> str:
    return (row.get(key) or "").strip()


def _int(row, key, default=None, allow_zero: bool = False):
    raw = _cell(row, key)
    if raw == "":
        if default is None:
            raise Skip("empty, and it has no default", key, raw)
        return default
    try:
        val = float(raw)
    except ValueError:
        raise Skip("not a number", key, raw) from None
    lo_ok = val >= 0 if allow_zero else val > 0
    if not math.isfinite(val) or not lo_ok or val != int(val):
        raise Skip("not a " + ("non-negative" if allow_zero else "positive") + " integer", key, raw)
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
    family: str = ""
    gpu: str = ""
    line: int = 0


def _spec_name(name: str, i: int) -> str:
    """The row's model name as a spec name: only letters, digits, space and . _ + - ( ), starting
    alphanumeric (the name is a label here; an odd character never costs a row)."""
    s = re.sub(r"[^A-Za-z0-9 ._+()-]", " ", name)
    s = " ".join(s.split())[:100].lstrip(" ._+()-")
    return s or f"row {i}"


_SPEC_FIELD_COLUMN = {"name": "model_name", "moe_top_k": "moe_topk", "moe_ffn_hidden": "ffn_hidden",
                      "gpus": "n_gpus"}


def _spec_skip(exc: Exception, row: dict) -> Skip:
    """A spec's validation error, named by the CSV column it came from where it has one."""
    errs = getattr(exc, "errors", None)
    if callable(errs):
        try:
            err = exc.errors()[0]
            loc = [p for p in err.get("loc", ()) if isinstance(p, str)]
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if loc:
                col = _SPEC_FIELD_COLUMN.get(loc[-1], loc[-1])
                return Skip(one_line(msg, 160), col, _cell(row, col) if col in COLUMNS else str(err.get("input")))
            return Skip("impossible row: " + one_line(msg, 160))
        except Exception:  # noqa: BLE001 - fall through to the plain message
            pass
    return Skip("impossible row: " + one_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 160))


def build_case(i: int, row: dict) -> RunCase:
    """Turn one CSV row into a scenario + config, or raise Skip with the reason."""
    metric = _cell(row, "measured_metric")
    if metric not in METRICS:
        raise Skip(f"not one of {', '.join(METRICS)}", "measured_metric", metric)
    raw = _cell(row, "measured_value")
    if raw == "":
        raise Skip("empty (nothing to compare with)", "measured_value", raw)
    try:
        measured = float(raw)
    except ValueError:
        raise Skip("not a number", "measured_value", raw) from None
    if not math.isfinite(measured) or measured <= 0:
        raise Skip("not a positive finite number", "measured_value", raw)
    empty = [k for k in ("n_layers", "hidden", "n_heads") if not _cell(row, k)]
    if empty:
        raise Skip("model architecture not given (n_layers/hidden/n_heads empty)", empty[0], "")
    if not any(_cell(row, k) for k in ("tp", "pp", "dp")):
        raise Skip("parallel configuration not given (tp/pp/dp empty)", "tp", "")
    gpu = map_gpu(row.get("gpu_type") or "")
    if gpu is None:
        raise Skip("matches no hardware preset (A100, H100, H200, H800, B200, GB200)", "gpu_type",
                   _cell(row, "gpu_type"))
    name = _cell(row, "model_name")
    L, h, heads = _int(row, "n_layers"), _int(row, "hidden"), _int(row, "n_heads")
    kv = _int(row, "n_kv_heads", heads)
    ffn = _int(row, "ffn_hidden", ASSUMED_FFN_MULTIPLE * h)
    vocab = _int(row, "vocab", ASSUMED_VOCAB)
    seq = _int(row, "seq_len")
    experts = _int(row, "moe_experts", 0, allow_zero=True)
    topk = _int(row, "moe_topk", 1, allow_zero=True) if experts else 0
    if h % heads:
        raise Skip(f"hidden {h} is not divisible by n_heads {heads}", "hidden", _cell(row, "hidden"))
    if heads % kv:
        raise Skip(f"n_heads {heads} is not divisible by n_kv_heads {kv}", "n_kv_heads", _cell(row, "n_kv_heads"))
    if experts and not 1 <= topk <= experts:
        raise Skip(f"moe_topk must be 1..moe_experts ({experts})", "moe_topk", _cell(row, "moe_topk"))
    act = "swiglu" if re.search(r"llama|mixtral|mistral", name.lower()) else "gelu"
    n = _int(row, "n_gpus")
    tp, pp, cp, ep = _int(row, "tp", 1), _int(row, "pp", 1), _int(row, "cp", 1), _int(row, "ep", 1)
    if n % (tp * pp * cp):
        raise Skip(f"n_gpus {n} is not divisible by tp*pp*cp = {tp * pp * cp}", "n_gpus", _cell(row, "n_gpus"))
    dp = _int(row, "dp", n // (tp * pp * cp))
    if tp * pp * cp * dp != n:
        raise Skip(f"tp*pp*cp*dp = {tp * pp * cp * dp} does not match n_gpus {n}", "dp", _cell(row, "dp"))
    if heads % tp or kv % tp:
        raise Skip(f"tp must divide n_heads ({heads}) and n_kv_heads ({kv})", "tp", _cell(row, "tp"))
    if pp > L:
        raise Skip(f"more pipeline stages than n_layers ({L})", "pp", _cell(row, "pp"))
    if (seq // 2) % cp:
        raise Skip(f"cp must divide seq_len/2 ({seq // 2}): each rank holds two sequence chunks", "cp",
                   _cell(row, "cp"))
    if ep > 1 and not experts:
        raise Skip("expert parallelism on a dense model (moe_experts empty or 0)", "ep", _cell(row, "ep"))
    if experts and (experts % ep or (dp * cp) % ep):
        raise Skip(f"ep must divide moe_experts ({experts}) and dp*cp ({dp * cp})", "ep", _cell(row, "ep"))
    vpp = _int(row, "vpp", 0, allow_zero=True)
    mb = _int(row, "micro_batch", ASSUMED_MICRO_BATCH)
    gb = _int(row, "global_batch_seqs")
    if gb % (dp * mb):
        raise Skip(f"global batch {gb} is not a multiple of dp*micro_batch = {dp * mb}", "global_batch_seqs",
                   _cell(row, "global_batch_seqs"))
    precision = _cell(row, "precision").lower() or "bf16"
    if precision not in ("bf16", "fp16", "fp8"):
        raise Skip("not bf16/fp16/fp8", "precision", _cell(row, "precision"))
    hw = load_preset("hardware", gpu)
    if precision == "fp8" and not hw.peak_flops_fp8:
        raise Skip(f"the {gpu} preset has no fp8 peak", "precision", _cell(row, "precision"))
    dom = hw.nvlink_domain_gpus
    if n > dom and n % dom:
        raise Skip(f"more than one {gpu} NVLink domain ({dom} GPUs) but not a whole number of them", "n_gpus",
                   _cell(row, "n_gpus"))
    sched_text = _cell(row, "pipeline_schedule")
    if pp > 1 and sched_text and vpp <= 1 and _match_schedule(sched_text) is None:
        raise Skip("names no known schedule (1F1B, interleaved, ZB-1p, ZB-2p, ZB-V, GPipe, DualPipe)",
                   "pipeline_schedule", sched_text)
    flavour_text = _cell(row, "zero_or_fsdp")
    if flavour_text and _match_flavour(flavour_text) is None:
        raise Skip("names no known data-parallel flavour (none, ddp, zero1, zero3, fsdp, hsdp)", "zero_or_fsdp",
                   flavour_text)
    rec = _cell(row, "recompute").lower()
    if rec and rec not in RECOMPUTE_VALUES:
        raise Skip("not none/selective/full (empty = not stated)", "recompute", _cell(row, "recompute"))
    sched = map_schedule(sched_text, vpp) if pp > 1 else "1f1b"
    chunks = (vpp or ASSUMED_INTERLEAVED_CHUNKS) if sched == "interleaved_1f1b" else (
        2 if sched in ("zbv", "dualpipev") else 1)
    if vpp > 1 and pp * vpp > L:  # only as stated: an assumed vpp is the code's guess, not the row's
        raise Skip(f"pp*vpp = {pp * vpp} model chunks for {L} layers", "vpp", _cell(row, "vpp"))
    try:
        model = ModelSpec(name=_spec_name(name, i), n_layers=L, hidden=h, ffn_hidden=ffn, n_heads=heads,
                          n_kv_heads=kv, vocab=vocab, seq_len=seq, activation=act,
                          moe_experts=experts, moe_top_k=topk, moe_ffn_hidden=ffn if experts else 0)
        cluster = ClusterSpec(name="published-run", buildings=({"gpus": n, "gpu": hw},),
                              scale_out=TierSpec(bandwidth_Bps=hw.nic_bandwidth_Bps,
                                                 n_paths=min(max(n, 1), MAX_SCALE_OUT_PATHS),
                                                 latency_s=ASSUMED_SCALE_OUT_LATENCY_s,
                                                 load_balancing="packet_spray", loss_recovery="sr"))
        src = (row.get("source") or "").lower()
        flash = not any(k in src for k in PRE_FLASH_SOURCES)
        scen = Scenario(model=model, workload=WorkloadSpec(global_batch_seqs=gb, seq_len=seq, precision=precision,
                                                           flash_attention=flash), cluster=cluster)
    except Exception as e:  # noqa: BLE001 - any spec error makes this row unusable; say why
        raise _spec_skip(e, row) from None
    flavour = map_flavour(flavour_text)
    if dp * cp == 1:
        flavour = "ddp"
    if not rec and any(k in (row.get("source") or "").lower() for k in ALWAYS_RECOMPUTE_SOURCES):
        rec = "full"
    cfg = Config(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, placement="dp_out", dp_flavour=flavour,
                 pp_schedule=sched, pp_chunks=chunks, micro_batch=mb,
                 recompute=rec if rec in RECOMPUTE_VALUES else "none")
    return RunCase(i, name, row.get("source") or "", row.get("notes") or "", metric, measured, scen, cfg,
                   rec in RECOMPUTE_VALUES, bool(_cell(row, "micro_batch")),
                   family=source_family(row.get("source") or ""), gpu=gpu)


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
            e = evaluate(case.scenario, cfg, params, check=False)
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


def load_runs(path: str | Path | None = None) -> Runs:
    """Read a runs CSV: every data row becomes a case or a skipped entry with its reason.
    Raises UserInputError (one line) for a file that cannot be read at all, lacks required
    columns, repeats a column, or has no scoreable row."""
    p = Path(path) if path else shipped_runs_path()
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise UserInputError("--runs", str(p), f"a readable CSV file ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserInputError("--runs", str(p), "a UTF-8 CSV file") from None
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
                             + ", ".join(missing) + (("; misspelt: " + " ".join(hints)) if hints else "") + ")")
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
        first = runs.skipped[0] if runs.skipped else None
        why = f"; row {first['row']}: {first['reason']}" if first else ""
        raise UserInputError("--runs", str(p), f"a CSV with at least one scoreable row (none of its {i} rows is{why})")
    return runs


def read_runs(path: str | Path | None = None) -> tuple[list[RunCase], list[dict]]:
    runs = load_runs(path)
    return runs.cases, runs.skipped


def score(cases, params: CostParams) -> list[dict]:
    from .costmodel.iteration import _scalar_row, iteration_formulas
    from .costmodel.xp import SCALAR
    rows = []
    for c in cases:
        cfg = resolve_unstated(c, params)
        out = iteration_formulas(c.scenario, _scalar_row(cfg), params, SCALAR)
        model_flops = out["mfu"] * out["iteration_time_s"] * c.scenario.n_gpus * \
            c.scenario.cluster.buildings[0].gpu.peak_flops(c.scenario.precision)
        pred = float(predicted_metric(c, out["iteration_time_s"], model_flops))
        rows.append({"row": c.row, "model_name": c.model_name, "measured_metric": c.metric,
                     "measured": c.measured, "predicted": pred,
                     "ape": 100.0 * abs(pred - c.measured) / c.measured,
                     "recompute": cfg.recompute, "micro_batch": cfg.micro_batch, "feasible": bool(out["feasible"]),
                     "source": c.source.split(";")[0][:60], "family": c.family})
    return rows


def _summary(apes) -> dict:
    a = np.asarray(list(apes), dtype=float)
    if a.size == 0:
        return {"median_ape": None, "p90_ape": None, "mean_ape": None}
    return {"median_ape": float(np.median(a)), "p90_ape": float(np.percentile(a, 90)), "mean_ape": float(np.mean(a))}


# ---------------------------------------------------------------------------------- rank correlation

RANK_MIN_ROWS = 3
"""A configuration group needs at least this many rows: with two, Spearman is always +-1."""
_LAYOUT_FIELDS = ("n_gpus", "tp", "pp", "dp", "cp", "ep", "pipeline_schedule", "vpp", "zero_or_fsdp", "micro_batch")


def _layout(c: RunCase) -> dict:
    """The parallel layout of a row (as stated; unstated micro-batches are not a difference)."""
    k = c.config
    return {"n_gpus": c.scenario.n_gpus, "tp": k.tp, "pp": k.pp, "dp": k.dp, "cp": k.cp, "ep": k.ep,
            "pipeline_schedule": k.pp_schedule, "vpp": k.pp_chunks, "zero_or_fsdp": k.dp_flavour,
            "micro_batch": k.micro_batch if c.micro_batch_stated else None}


def _workload(c: RunCase) -> dict:
    s = c.scenario
    return {"global_batch_seqs": s.global_batch_seqs, "seq_len": s.seq_len, "precision": s.precision,
            "recompute": c.config.recompute if c.recompute_stated else None}


def _architecture(c: RunCase) -> tuple:
    m = c.scenario.model
    return (m.n_layers, m.hidden, m.ffn_hidden, m.n_heads, m.n_kv_heads, m.vocab, m.moe_experts, m.moe_top_k,
            m.activation)


def spearman(x, y) -> float | None:
    """Spearman's rho (Pearson correlation of average ranks; ties share their mean rank).
    None when either side is constant (the correlation is undefined)."""
    from scipy.stats import rankdata
    rx, ry = rankdata(np.asarray(x, dtype=float)), rankdata(np.asarray(y, dtype=float))
    if len(rx) < 2 or np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def configuration_groups(cases) -> list[list[RunCase]]:
    """Rows of one source family with the same model architecture (layers, widths, heads, vocab,
    experts; not the name), GPU type and measured metric, that differ in their parallel layout
    (n_gpus, tp, pp, dp, cp, ep, schedule, vpp, DP flavour or stated micro-batch): at least
    RANK_MIN_ROWS rows and at least two distinct layouts. Batch size, sequence length,
    precision and recomputation may vary as well; each group lists what varies."""
    groups: dict[tuple, list[RunCase]] = {}
    for c in cases:
        groups.setdefault((c.family.lower(), _architecture(c), c.gpu, c.metric), []).append(c)
    out = []
    for g in groups.values():
        layouts = {tuple(sorted(_layout(c).items(), key=lambda kv: kv[0])) for c in g}
        if len(g) >= RANK_MIN_ROWS and len(layouts) >= 2:
            out.append(g)
    return out


def _spread(values) -> float:
    """(max - min) / median, in percent: how far apart the values a rank correlation orders are."""
    v = np.asarray(values, dtype=float)
    return float(100.0 * np.ptp(v) / np.median(v))


def _base_name(names) -> str:
    short = sorted({re.sub(r"\s*\(.*\)\s*$", "", n).strip() or n for n in names}, key=len)
    return short[0] if short else ""


def rank_correlations(cases, predicted: dict[int, float], compare: dict[int, float] | None = None) -> dict:
    """Spearman's rho between predicted (row -> value) and measured values in every
    configuration group; ``compare`` adds a second prediction set's rho beside it."""
    groups = []
    for g in configuration_groups(cases):
        meas = [c.measured for c in g]
        pred = [predicted[c.row] for c in g]
        varies = [k for k in (*_LAYOUT_FIELDS, "global_batch_seqs", "seq_len", "precision", "recompute")
                  if len({({**_layout(c), **_workload(c)})[k] for c in g}) > 1]
        entry = {"family": g[0].family, "model": _base_name([c.model_name for c in g]), "gpu": g[0].gpu,
                 "metric": g[0].metric, "n": len(g), "rows": [c.row for c in g],
                 "model_names": sorted({c.model_name for c in g}), "varies": varies,
                 "measured": meas, "predicted": pred, "measured_spread_pct": _spread(meas),
                 "predicted_spread_pct": _spread(pred), "spearman": spearman(pred, meas)}
        if compare is not None:
            entry["spearman_compare"] = spearman([compare[c.row] for c in g], meas)
        groups.append(entry)
    rhos = [g["spearman"] for g in groups if g["spearman"] is not None]
    out = {"rule": "groups: rows of one source family with the same model architecture, GPU type and "
                   f"metric, >= {RANK_MIN_ROWS} rows, >= 2 parallel layouts; Spearman rho of predicted vs measured",
           "groups": groups, "n_groups": len(groups),
           "n_undefined": sum(g["spearman"] is None for g in groups),
           "min_spearman": min(rhos) if rhos else None,
           "mean_spearman": float(np.mean(rhos)) if rhos else None}
    if compare is not None:
        rc = [g["spearman_compare"] for g in groups if g["spearman_compare"] is not None]
        out["min_spearman_compare"] = min(rc) if rc else None
    return out


# ---------------------------------------------------------------------------------- in-sample

def validate(path=None, params: CostParams | None = None) -> dict:
    from .costmodel.params import default_params
    params = params or default_params()
    runs = load_runs(path)
    rows = score(runs.cases, params)
    s = _summary(r["ape"] for r in rows)
    rank = rank_correlations(runs.cases, {r["row"]: r["predicted"] for r in rows})
    return {"mode": "in_sample", "rows": rows, "skipped": runs.skipped, "n": len(rows),
            "median_ape": s["median_ape"], "p90_ape": s["p90_ape"], "mean_ape": s["mean_ape"],
            "params": params.to_dict(), "ignored_columns": runs.ignored_columns,
            "families": _family_table(runs.cases, rows), "rank_correlation": rank,
            "min_spearman": rank["min_spearman"]}


def _family_table(cases, rows, compare_rows=None) -> list[dict]:
    by_row = {r["row"]: r for r in rows}
    cmp_row = {r["row"]: r for r in compare_rows} if compare_rows else None
    fams: dict[str, list[RunCase]] = {}
    for c in cases:
        fams.setdefault(c.family, []).append(c)
    out = []
    for fam, cs in fams.items():
        entry = {"family": fam, "rows": len(cs), **_summary(by_row[c.row]["ape"] for c in cs)}
        if cmp_row is not None:
            entry["in_sample_median_ape"] = _summary(cmp_row[c.row]["ape"] for c in cs)["median_ape"]
        out.append(entry)
    return out


FIT_BOUNDS = {
    "gemm_efficiency_max": (0.3, 0.95),
    "gemm_half_intensity_ridge_ratio": (0.01, 5.0),
    "attention_core_efficiency": (0.1, 0.9),
    "fp8_gemm_speedup_realised": (0.0, 1.0),
    "network_efficiency": (0.3, 1.0),
    "nvlink_efficiency": (0.3, 1.0),
}


def fit_params(path=None, start: CostParams | None = None, cases=None) -> tuple[CostParams, dict]:
    """Least-squares fit of the named efficiency parameters on every scored row (of ``path``,
    or the given ``cases``).

    Residual per row: log(predicted / measured) (scale-free across metrics), soft-L1 loss so a
    few rows with unstated settings cannot dominate. Returns the parameters and a fit report.
    """
    from scipy.optimize import least_squares
    start = start or CostParams()
    names = list(FIT_BOUNDS)
    if cases is None:
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


# ---------------------------------------------------------------------------------- leave one family out

_WORKER_CASES: list = []


def _init_worker(cases) -> None:
    """A fit process receives the cases once: the cost model's per-scenario caches then stay warm
    across the folds it runs (sending the cases with every fold re-warms them each time)."""
    _WORKER_CASES[:] = cases


def _fit_without(args):
    """Fit on every case whose family is not ``held_out`` (None: on all cases)."""
    held_out, start, cases = args
    cases = cases if cases is not None else _WORKER_CASES
    return fit_params(cases=[c for c in cases if held_out is None or c.family.lower() != held_out], start=start)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def loso(path=None, start: CostParams | None = None, jobs: int = 1, progress: bool = False) -> dict:
    """Leave-one-source-family-out validation.

    For every source family F: fit the FIT_BOUNDS parameters (:func:`fit_params`, the same fit
    as ``--fit``, from the same start) on the rows of all other families, and score F's rows
    with them. Every row is scored exactly once, by the fit that did not see its family. Beside
    it: the in-sample figure (the same fit on all rows, every row scored with it) and the shipped
    calibration's figure. ``jobs`` > 1 runs the fits in that many processes (same numbers).
    """
    from .costmodel.params import default_params
    t0 = time.perf_counter()
    start = start or CostParams()
    runs = load_runs(path)
    cases = runs.cases
    fams: dict[str, list[RunCase]] = {}
    for c in cases:
        fams.setdefault(c.family.lower(), []).append(c)
    if len(fams) < 2:
        only = next(iter(fams.values()))[0].family
        raise UserInputError("--loso", runs.path, f"runs from at least 2 source families (all scoreable rows are "
                                                  f"from {only!r}: nothing is left to fit on)")
    keys = list(fams)
    # the all-rows fit (the largest) first, so that it never runs alone at the end of a pool
    held = [None] + keys
    jobs = max(1, min(jobs, len(held)))
    if progress:
        print(f"autotune validate --loso: {len(held)} fits ({len(keys)} held-out families + all rows) "
              f"on {jobs} process(es)", file=sys.stderr, flush=True)
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_init_worker, initargs=(cases,)) as ex:
            fits = list(ex.map(_fit_without, [(k, start, None) for k in held]))
    else:
        fits = []
        for j, k in enumerate(held):
            if progress:
                name = fams[k][0].family if k is not None else "(none: all rows)"
                print(f"  fit {j + 1}/{len(held)}, held out: {name}", file=sys.stderr, flush=True)
            fits.append(_fit_without((k, start, cases)))
    all_params, all_report = fits[0]
    in_rows = score(cases, all_params)
    in_by_row = {r["row"]: r for r in in_rows}
    shipped = default_params()
    shipped_rows = score(cases, shipped)
    shipped_by_row = {r["row"]: r for r in shipped_rows}
    held_rows, families = [], []
    for k, (params, report) in zip(keys, fits[1:]):
        fam_cases = fams[k]
        rows = score(fam_cases, params)
        for r in rows:
            r["held_out_of_fit"] = fam_cases[0].family
            r["in_sample_predicted"] = in_by_row[r["row"]]["predicted"]
            r["in_sample_ape"] = in_by_row[r["row"]]["ape"]
            r["shipped_predicted"] = shipped_by_row[r["row"]]["predicted"]
            r["shipped_ape"] = shipped_by_row[r["row"]]["ape"]
        held_rows += rows
        families.append({"family": fam_cases[0].family, "rows": len(rows), **_summary(r["ape"] for r in rows),
                         "in_sample_median_ape": _summary(r["in_sample_ape"] for r in rows)["median_ape"],
                         "shipped_median_ape": _summary(r["shipped_ape"] for r in rows)["median_ape"],
                         "fit_rows": report["n_rows"], "fit": report, "params": params.to_dict()})
    held_rows.sort(key=lambda r: r["row"])
    overall = _summary(r["ape"] for r in held_rows)
    rank = rank_correlations(cases, {r["row"]: r["predicted"] for r in held_rows},
                             compare={r["row"]: r["predicted"] for r in in_rows})
    return {"mode": "loso", "family_rule": source_family.__doc__.split("\n\n")[1].strip().replace("\n    ", " "),
            "rows": held_rows, "skipped": runs.skipped, "ignored_columns": runs.ignored_columns,
            "n": len(held_rows), "n_families": len(keys),
            "median_ape": overall["median_ape"], "p90_ape": overall["p90_ape"], "mean_ape": overall["mean_ape"],
            "families": families,
            "in_sample": {**_summary(r["ape"] for r in in_rows), "fit": all_report, "params": all_params.to_dict(),
                          "what": "the same fit on all rows, every row scored with it"},
            "shipped": {**_summary(r["ape"] for r in shipped_rows), "params": shipped.to_dict(),
                        "what": "the shipped calibration (autotune/data/calibration.yaml), "
                                "as plain `autotune validate` scores"},
            "rank_correlation": rank, "min_spearman": rank["min_spearman"],
            "jobs": jobs, "seconds": round(time.perf_counter() - t0, 2)}
