"""Dense GEMMs at the row counts TP comm overlap cuts them into, measured on one GPU.

TransformerEngine's comm-GEMM overlap (WorkloadSpec.tp_comm_overlap) runs a TP-adjacent GEMM of
a micro-batch of M tokens as pieces of M / pieces rows against the whole weight (tp pieces on its
all-gather ring); the cost model charges the whole GEMM times what the split costs kernels run
alone (costmodel/kernels.py, ``split_gemm_ratio`` and ``te_pieces``). gpu_kernels.py measures
dense GEMMs at M >= 2,048 only; this script measures
the layer GEMMs of GPT-3 175B, MT-NLG 530B (non-gated MLP, multi-head attention) and Llama-3
8B / 70B (SwiGLU, GQA) under TP 1-8 at M = 128-8,192 (kind ``gemm``), and the tp chunks run back
to back as the overlap runs them, without the communication (kind ``gemm_chunks``: M rows in all,
``chunks`` GEMMs of M / chunks rows each).

Usage: python gpu_gemm_chunks.py OUT_DIR [--smoke]   (--smoke: tiny shapes on CPU)
Writes OUT_DIR/gpu_gemm_chunks.csv in gpu_kernels.py's format; ``autotune kernels --data OUT_DIR``
scores it beside that folder's gpu_kernels.csv and gpu_layers.csv.
"""
import csv, os, sys, time

import torch
from timing import timeit as _timeit

OUT = sys.argv[1]
SMOKE = "--smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
BUDGET_S = 150.0 if not SMOKE else 60.0
T0 = time.time()
rows = []

# (name, hidden, ffn, kv width (kv_heads x head_dim), gated MLP, TP degrees)
MODELS = [("gpt3-175b", 12288, 49152, 12288, False, (4, 8)),
          ("mt-nlg-530b", 20480, 81920, 20480, False, (8,)),
          ("llama3-70b", 8192, 28672, 1024, True, (2, 4, 8)),
          ("llama3-8b", 4096, 14336, 1024, True, (1, 2, 4, 8))]
MS = [128, 256, 512, 1024, 2048, 4096, 8192]
if SMOKE:
    MODELS = [("tiny", 64, 256, 64, True, (1, 2))]
    MS = [16, 32]


def timeit(fn):
    """Milliseconds per call (timing.timeit: warm up, then about 20 ms of calls under CUDA events)."""
    return _timeit(fn, SMOKE)


def add(kind, ms, M, K, N, **extra):
    rows.append({"kind": kind, "dtype": "bf16", "ms": round(ms, 5), "M": M, "K": K, "N": N,
                 "tflops": round(2 * M * K * N / (ms * 1e-3) / 1e12, 2), **extra})


def layer_gemms(h, ffn, kv, gated, tp):
    """(K, N) of QKV, output projection, MLP up (gate and up fused where gated) and down, per TP rank."""
    up = (2 if gated else 1) * ffn // tp
    return [(h, (h + 2 * kv) // tp), (h // tp, h), (h, up), (ffn // tp, h)]


def run():
    seen = set()
    for name, h, ffn, kv, gated, tps in MODELS:
        for tp in tps:
            for K, N in layer_gemms(h, ffn, kv, gated, tp):
                b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16)
                for M in MS:
                    if time.time() - T0 > BUDGET_S:
                        return
                    a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
                    if (M, K, N) not in seen:
                        seen.add((M, K, N))
                        add("gemm", timeit(lambda: a @ b), M, K, N, model=name, tp=tp)
                    if tp > 1 and M >= (1024 if not SMOKE else 32):
                        parts = list(a.chunk(tp))

                        def chunks():
                            for x in parts:
                                x @ b
                        add("gemm_chunks", timeit(chunks), M, K, N, chunks=tp, model=name, tp=tp)


info = {"device": "cpu"} if SMOKE else {"device": torch.cuda.get_device_properties(0).name, "torch": torch.__version__,
                                        "cuda": torch.version.cuda}
print(info, flush=True)
try:
    run()
except Exception as exc:  # noqa: BLE001
    rows.append({"kind": "gemm", "error": str(exc)[:200]})
keys = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("kind", "dtype"), k))
os.makedirs(OUT, exist_ok=True)
with open(os.path.join(OUT, "gpu_gemm_chunks.csv"), "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=keys); w.writeheader(); w.writerows(rows)
print("rows", len(rows), "total", round(time.time() - T0, 1), "s", info)
