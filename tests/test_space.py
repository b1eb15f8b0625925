import numpy as np
import pytest

from autotune.errors import UserInputError
from autotune.space import SearchSpace, batch_from_configs, config_at
from autotune.specs import Config, build_scenario


def test_enumeration_is_exactly_the_legal_set(campus):
    space = SearchSpace(campus)
    n = 0
    for batch in space.enumerate(1 << 17):
        assert space.legal_mask(batch).all()
        n += len(batch["tp"])
    assert n == space.legal_count()
    assert space.legal_count() < space.raw_size()


def test_mask_rejects_most_of_a_uniform_draw_over_the_raw_product(campus):
    """The naive categorical product is mostly illegal (docs/search.md): count it, don't assume it."""
    space = SearchSpace(campus)
    rng = np.random.default_rng(0)
    n = 20000
    b = {"tp": rng.choice(space.tp_values, n), "cp": rng.choice(space.cp_values, n),
         "ep": rng.choice(space.ep_values, n), "pp": rng.choice(space.pp_values, n)}
    b["dp"] = np.maximum(campus.n_gpus // (b["tp"] * b["cp"] * b["pp"]), 1)
    b.update({"placement": rng.integers(0, 5, n), "dp_flavour": rng.integers(0, 4, n),
              "pp_schedule": rng.integers(0, 7, n), "pp_chunks": rng.choice([1, 2, 3, 4], n),
              "micro_batch": rng.choice(space.micro_batches, n), "recompute": rng.integers(0, 3, n),
              "overlap_dp": np.ones(n, int), "xb_load_balancing": rng.integers(0, 3, n),
              "xb_queue_pairs": rng.choice(space.queue_pairs, n), "xb_loss_recovery": rng.integers(0, 2, n),
              "collective": rng.integers(0, 4, n), "nccl_protocol": rng.integers(0, 4, n),
              "nccl_channels": rng.choice(space.channels, n), "nccl_buffer_mib": np.full(n, 4),
              "dp_bucket_mib": np.full(n, 80)})
    assert space.legal_mask(b).mean() < 0.05


def test_sample_is_legal_and_roundtrips(campus):
    space = SearchSpace(campus)
    b = space.sample(500, seed=1)
    assert space.legal_mask(b).all()
    cfgs = [config_at(b, i) for i in range(500)]
    again = batch_from_configs(cfgs)
    for k in b:
        assert np.array_equal(np.asarray(b[k], dtype=np.int64), np.asarray(again[k], dtype=np.int64))
    assert Config(**cfgs[0].to_flat()) == cfgs[0]


@pytest.mark.parametrize("fields, field", [
    ({"tp": 16, "pp": 8, "dp": 80}, "config.tp"),                          # beyond the NVLink domain
    ({"tp": 8, "pp": 16, "dp": 80, "pp_schedule": "zbv", "pp_chunks": 1}, "config.pp_chunks"),
    ({"tp": 8, "pp": 16, "dp": 41}, "config.dp"),                         # product mismatch
    ({"tp": 8, "pp": 16, "dp": 80, "placement": "pp_out", "dp_flavour": "ddp"}, "config.placement"),
    ({"tp": 8, "pp": 10, "dp": 128, "placement": "pp_out", "dp_flavour": "hsdp"}, "config.dp_flavour"),
    ({"tp": 8, "pp": 16, "dp": 80, "ep": 2}, "config.ep"),                # dense model
])
def test_illegal_configs_get_a_one_line_reason(campus, fields, field):
    with pytest.raises(UserInputError) as ei:
        SearchSpace(campus).check(Config(**fields))
    assert str(ei.value).startswith(field) and "allowed" in str(ei.value)


def test_single_building_has_no_transport_dimension():
    s = build_scenario("llama3-8b", "single-building")
    space = SearchSpace(s)
    assert space.n_transport == len(space.collectives)
    assert space.legal_count() > 0


def test_moe_space_has_expert_parallelism():
    s = build_scenario("llama4-maverick", "metro-2bldg")
    space = SearchSpace(s)
    eps = set(space.legal_core["ep"].tolist())
    assert max(eps) > 1
    placements = set(space.legal_core["placement"].tolist())
    assert {0, 1, 3} <= placements        # dp_out, pp_out and ep_out all legal for an MoE model
