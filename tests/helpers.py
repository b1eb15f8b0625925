"""Scenario builders shared by tests."""
from autotune.specs import Scenario


def idealised(scen: Scenario, scale: float = 1.0) -> Scenario:
    """Same scenario with a network that costs nothing: huge bandwidth, zero latency and loss."""
    big = 1e30
    c = scen.cluster
    gpus = tuple(b.model_copy(update={"gpu": b.gpu.model_copy(update={
        "nvlink_bandwidth_Bps": big, "nvlink_latency_s": 0.0, "nic_bandwidth_Bps": big})}) for b in c.buildings)

    def free(t):
        return None if t is None else t.model_copy(update={"bandwidth_Bps": big, "latency_s": 0.0, "distance_km": 0.0,
                                                            "loss_rate": 0.0, "oversubscription": 1.0})
    cl = c.model_copy(update={"buildings": gpus, "scale_out": free(c.scale_out), "cross_zone": free(c.cross_zone),
                              "cross_building": free(c.cross_building), "cross_region": free(c.cross_region)})
    return scen.model_copy(update={"cluster": cl})


def with_tier(scen: Scenario, tier: str, **update) -> Scenario:
    c = scen.cluster
    t = getattr(c, tier).model_copy(update=update)
    return scen.model_copy(update={"cluster": c.model_copy(update={tier: t})})
