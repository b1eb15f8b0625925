"""TP communication overlapped with its GEMMs (WorkloadSpec.tp_comm_overlap, issue 13), and the TP
collectives' NCCL latencies: invariants as property tests."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.configbatch import batch_from_configs
from autotune.costmodel import evaluate_batch
from autotune.costmodel.collectives import tp_collective_time
from autotune.costmodel.xp import SCALAR
from autotune.specs import Config, build_scenario

SETTINGS = settings(max_examples=25, deadline=None)


def _scen(overlap: bool, model="llama3-70b"):
    s = build_scenario(model, "single-building", gpus=64, global_batch=256)
    return s.model_copy(update={"workload": s.workload.model_copy(update={"tp_comm_overlap": overlap})})


@SETTINGS
@given(tp=st.sampled_from([1, 2, 4, 8]), mb=st.sampled_from([1, 2, 4]),
       rec=st.sampled_from(["none", "selective", "full"]), model=st.sampled_from(["llama3-70b", "llama3-8b"]))
def test_overlap_hides_at_most_all_but_one_chunk_and_costs_at_most_its_chunked_gemms(tp, mb, rec, model):
    """Overlap never exposes more TP time, never less than half of one of tp pieces (the ring's
    half of the collectives; exchanges.tp_hidden has the exact floor); its GEMMs run in
    pieces (kernels.te_pieces), never faster than whole, so the step gains at most the hidden TP
    time and loses at most the pieces' extra GEMM time."""
    cfg = Config(tp=tp, pp=1, dp=64 // tp, micro_batch=mb, recompute=rec, dp_flavour="zero1")
    b = batch_from_configs([cfg])
    off, on = (evaluate_batch(_scen(o, model), b, check=False) for o in (False, True))
    assert on["tp_comm_s"][0] <= off["tp_comm_s"][0]
    assert on["tp_comm_s"][0] >= off["tp_comm_s"][0] * 0.5 / tp * (1 - 1e-12)
    assert on["compute_s"][0] >= off["compute_s"][0] * (1 - 1e-12)
    gained = off["tp_comm_s"][0] - on["tp_comm_s"][0]
    lost = on["compute_s"][0] - off["compute_s"][0]
    # the straggler term scales the whole step (stragglers.py), so compare the step before it
    on_t, off_t = (x["iteration_time_s"][0] - x["straggler_s"][0] for x in (on, off))
    assert on_t <= off_t + lost + 1e-12
    assert on_t >= off_t - gained - 1e-9
    if tp == 1:
        assert on["tp_comm_s"][0] == off["tp_comm_s"][0] == 0.0
        assert on["compute_s"][0] == off["compute_s"][0]


@SETTINGS
@given(size=st.floats(1e3, 1e9), n=st.sampled_from([2, 4, 8, 72]), bw=st.floats(1e10, 1e12))
def test_tp_collective_is_at_least_the_bytes_at_link_rate_and_grows_with_size(size, n, bw):
    t = tp_collective_time(size, n, bw, 1.0, True, SCALAR)
    assert t >= (n - 1) / n * size / bw
    assert tp_collective_time(2 * size, n, bw, 1.0, True, SCALAR) >= t
    assert tp_collective_time(size, n, bw, 0.0, True, SCALAR) <= t        # no software latency: never slower
