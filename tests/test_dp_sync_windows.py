"""The step-end DP collectives' overlap window per pipeline schedule (pipeline.sync_windows,
Megatron-Core's per-chunk grad and param sync under the interleaved schedule; issue 13)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.configbatch import batch_from_configs
from autotune.costmodel import evaluate_batch
from autotune.costmodel.pipeline import S_1F1B, S_INTERLEAVED, S_ZBV, sync_windows
from autotune.costmodel.xp import SCALAR
from autotune.specs import Config, build_scenario

SETTINGS = settings(max_examples=30, deadline=None)


@SETTINGS
@given(p=st.integers(1, 32), v=st.integers(1, 16), m=st.integers(1, 512))
def test_window_grows_with_chunks_and_is_one_micro_batch_without_them(p, v, m):
    win, last = sync_windows(S_INTERLEAVED, float(p), float(v), float(m), SCALAR)
    assert 1.0 <= win <= min(m, p) + 1e-12 or v == 1
    assert abs(last - 1.0 / v) < 1e-12
    if v > 1:
        win2, _ = sync_windows(S_INTERLEAVED, float(p), float(v + 1), float(m), SCALAR)
        assert win2 >= win - 1e-12
    for sched in (S_1F1B, S_ZBV):     # other schedules sync in the last micro-batch only
        assert sync_windows(sched, float(p), float(v), float(m), SCALAR) == (1.0, 1.0)
    assert sync_windows(S_INTERLEAVED, float(p), 1.0, float(m), SCALAR) == (1.0, 1.0)


@SETTINGS
@given(flavour=st.sampled_from(["ddp", "zero1"]), gb=st.sampled_from([64, 128, 512]),
       model=st.sampled_from(["llama3-70b", "llama3-8b"]))
def test_more_chunks_never_expose_more_dp_time_and_never_hide_more_than_the_link(flavour, gb, model):
    scen = build_scenario(model, "single-building", gpus=64, global_batch=gb)
    cfgs = [Config(tp=4, pp=4, dp=4, pp_schedule="interleaved_1f1b", pp_chunks=v, micro_batch=1,
                   dp_flavour=flavour, recompute="full") for v in (1, 2, 4)]
    out = evaluate_batch(scen, batch_from_configs(cfgs), check=False)
    exposed, link = np.asarray(out["dp_exposed_s"]), np.asarray(out["dp_link_s"])
    assert np.all(np.diff(exposed) <= 1e-12)
    assert np.all(exposed <= link * (1 + 1e-12)) and np.all(exposed > 0.0)
