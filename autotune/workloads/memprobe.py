"""Peak tensor memory of one rank of the reference workload, measured, not modelled.

On a GPU one reads ``torch.cuda.max_memory_allocated``: the most bytes live tensors held at once.
The CPU allocator keeps no such counter, but torch's profiler with ``profile_memory=True`` records
every allocation and free of the CPU allocator with the running total ("Total Allocated" in its
trace, counted from the moment the profiler starts). Started before the model is built, that
total is every tensor the rank owns: parameters, gradients, optimizer states, FSDP's sharded and
unsharded copies, activations, logits, communication buffers the workload allocates as tensors.
The peak over the measured steps is the steady state (optimizer states exist after the warm-up).
Not counted, as on a GPU: the allocator's cached but free blocks, gloo's own C++ buffers, the
Python interpreter.
"""
from __future__ import annotations

import json
import os
import tempfile

WINDOW = "autotune.measured_steps"
"""The profiler range that marks the measured steps (the peak is taken inside it)."""


class PeakMemory:
    def __init__(self):
        from torch.profiler import ProfilerActivity, profile
        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._prof.__enter__()

    def window(self):
        """Context manager around the measured steps."""
        from torch.profiler import record_function
        return record_function(WINDOW)

    def stop(self) -> dict:
        """Stop the profiler; the peak and the level at the window's start (bytes)."""
        self._prof.__exit__(None, None, None)
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            self._prof.export_chrome_trace(path)
            with open(path) as fh:
                events = json.load(fh)["traceEvents"]
        finally:
            os.unlink(path)
        return peak_in_window(events)


def peak_in_window(events: list[dict]) -> dict:
    """Largest running total of allocated bytes within the WINDOW range, and the total just before
    it opened (the memory the rank holds between steps). Raises ValueError without a window or
    memory events (the caller reports it as the run's error)."""
    spans = [(e["ts"], e["ts"] + e.get("dur", 0.0)) for e in events if e.get("name") == WINDOW and e.get("ph") == "X"]
    if not spans:
        raise ValueError("the profiler trace has no measured-steps range")
    t0, t1 = min(s for s, _ in spans), max(e for _, e in spans)
    mem = sorted((e["ts"], e["args"]["Total Allocated"]) for e in events
                 if e.get("name") == "[memory]" and "Total Allocated" in e.get("args", {}))
    inside = [b for ts, b in mem if t0 <= ts <= t1]
    if not inside:
        raise ValueError("the profiler recorded no allocation in the measured steps")
    before = [b for ts, b in mem if ts < t0]
    # the level at the window's start counts too (its first event may be a free)
    return {"peak_bytes": float(max(inside + before[-1:])), "between_steps_bytes": float(before[-1] if before else 0.0)}
