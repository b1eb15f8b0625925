"""CUDA-event timing shared by the measuring scripts beside it (gpu_kernels.py, gpu_layers.py,
gpu_gemm_chunks.py): each imports it from its own folder."""
import time

import torch


def timeit(fn, smoke=False, iters=None):
    """Milliseconds per call of ``fn``. On a CPU (``smoke``): the second of two calls, wall clock.
    On a GPU: three warm-up calls, then a batch of ``iters`` calls timed with CUDA events; where
    ``iters`` is None, as many as take about 20 ms (3-200), from one more timed call."""
    if smoke:
        fn(); t = time.perf_counter(); fn(); return (time.perf_counter() - t) * 1e3
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if iters is None:
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        iters = max(3, min(200, int(20.0 / max(s.elapsed_time(e), 1e-3))))
    s.record()
    for _ in range(iters):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters
