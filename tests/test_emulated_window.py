"""Real TCP transfers through a user-space store-and-forward link (experiments/emulated_window_check.py)
against the cost model's window physics: send/recv with a bounded chunk window and a Simple-protocol
ring all-gather across two emulated buildings, at a 10 ms one-way delay."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))


@pytest.mark.slow
def test_model_within_25_percent_of_measured_through_a_delayed_link():
    import emulated_window_check as ew
    rate, d, size = 200e6 / 8, 0.010, 4 * 2**20
    cases = [(ew.measure_p2p(size, 64 * 1024, 8, rate, d), ew.model_p2p(size, 64 * 1024, 8, rate, d)),
             (ew.measure_ring(size, 512 * 1024, 4 * rate, rate, d), ew.model_ring(size, 512 * 1024, 4 * rate, rate, d))]
    for measured, model in cases:
        assert model == pytest.approx(measured, rel=0.25)
    # the window binds: the same send/recv with a 4x larger window is faster, as the model says
    big = ew.measure_p2p(size, 256 * 1024, 8, rate, 0.020)
    small = ew.measure_p2p(size, 64 * 1024, 8, rate, 0.020)
    assert big < small and ew.model_p2p(size, 256 * 1024, 8, rate, 0.020) < ew.model_p2p(size, 64 * 1024, 8, rate, 0.020)
