"""Transport-free facts about a core configuration, used to prune exact searches.

Memory never depends on the transport knobs (load balancing, queue pairs, loss recovery,
collective, protocol, channels, buffer, bucket), so a core row that does not fit does not fit
with any of them. Every communication term enters the iteration time through sums and maxima of
non-negative times, so dropping the terms the transport knobs touch gives a lower bound on the
row's time with any transport (admissible for branch-and-bound; checked by a property test):
- the cross-building tier costs nothing but its NIC rate (``transport_free``): every transport
  reaches at most the NIC there, and no latency or loss;
- data-parallel collectives cost nothing (``bound_params``: ``dp_collective_scale`` = 0), nor
  does NCCL's software latency;
- what no transport knob touches stays: tensor parallelism on NVLink, in-building pipeline,
  context- and expert-parallel exchanges, compute, bubble, optimizer.
"""
from __future__ import annotations

from ..specs.scenario import Scenario
from .params import CostParams, default_params

FREE_BANDWIDTH_Bps = 1e30


def free_network(scen: Scenario) -> Scenario:
    """The same scenario with a network that costs nothing: unbounded bandwidth (and no per-link
    rate cap), zero latency and loss."""
    c = scen.cluster
    gpus = tuple(b.model_copy(update={"gpu": b.gpu.model_copy(update={
        "nvlink_bandwidth_Bps": FREE_BANDWIDTH_Bps, "nvlink_latency_s": 0.0, "nic_bandwidth_Bps": FREE_BANDWIDTH_Bps})})
        for b in c.buildings)

    def free(t):
        return None if t is None else t.model_copy(update={"bandwidth_Bps": FREE_BANDWIDTH_Bps, "latency_s": 0.0,
                                                            "distance_km": 0.0, "loss_rate": 0.0, "oversubscription": 1.0,
                                                            "link_Bps": None})
    cl = c.model_copy(update={"buildings": gpus, "scale_out": free(c.scale_out), "cross_zone": free(c.cross_zone),
                              "cross_building": free(c.cross_building), "cross_region": free(c.cross_region)})
    return scen.model_copy(update={"cluster": cl})


def transport_free(scen: Scenario) -> Scenario:
    """The same scenario with the tier between buildings unbounded, without latency or loss."""
    c = scen.cluster
    upd = {k: getattr(c, k).model_copy(update={"bandwidth_Bps": FREE_BANDWIDTH_Bps, "latency_s": 0.0,
                                                 "distance_km": 0.0, "loss_rate": 0.0, "oversubscription": 1.0,
                                                 "link_Bps": None})
           for k in ("cross_building", "cross_region") if getattr(c, k) is not None}
    return scen.model_copy(update={"cluster": c.model_copy(update=upd)}) if upd else scen


def bound_params(params: CostParams | None) -> CostParams:
    """The same calibration with data-parallel collectives and NCCL's software latencies at zero,
    continuous work shares between buildings of different speeds (``hetero.hetero_shares``), and
    no host floor (``host_floor.host_launch_time``): the floor only lengthens passes, but between
    buildings of different speeds it scales with the shares, which the transport moves, so it is
    left out of the bound rather than bounded."""
    return (params or default_params()).with_values(nccl_overhead_scale=0.0, dp_collective_scale=0.0,
                                                    integer_shares=0.0, host_layer_fwd_us=0.0)
