"""InternEvo's hybrid ZeRO-1 (WorkloadSpec.zero1_param_sync = broadcast, zero1_shard_ranks):
gradients all-reduced over every data-parallel rank, then one broadcast per optimizer-shard owner
to its shard group after the step (zero1.zero1_broadcasts)."""
from __future__ import annotations

import pytest

import autotune.validation as V
from autotune.costmodel import evaluate
from autotune.specs import Config, build_scenario
from autotune.specs.workload import WorkloadSpec

from test_runs_schema import _write


def _run(n, *over):
    s = build_scenario("llama3-8b", "single-building", gpus=n, overrides=[f"workload.global_batch_seqs={8 * n}", *over])
    cfg = Config(tp=1, pp=1, dp=n, micro_batch=2, recompute="none", dp_flavour="zero1")
    return evaluate(s, cfg, check=False)


BCAST = "workload.zero1_param_sync=broadcast"


def test_defaults_leave_the_key_alone_and_a_group_needs_the_broadcast_sync():
    a = build_scenario("llama3-8b", "single-building")
    assert a.workload.zero1_param_sync == "all_gather" and a.workload.zero1_shard_ranks == 0
    assert a.key == build_scenario("llama3-8b", "single-building",
                                   overrides=["workload.zero1_param_sync=all_gather", "workload.zero1_shard_ranks=0"]).key
    with pytest.raises(ValueError, match="zero1_shard_ranks 8 needs zero1_param_sync broadcast"):
        WorkloadSpec(zero1_shard_ranks=8)


def test_one_broadcast_per_rank_grows_with_the_group_and_a_node_group_stays_flat():
    """Over all 1,024 ranks the 1,024 broadcasts (each over 1,024 ranks) cost seconds; the
    reduce-scatter + all-gather sync and 8-rank groups stay within 5% of 8 GPUs."""
    base = _run(8).iteration_time_s
    assert _run(1024).iteration_time_s < 1.05 * base
    assert _run(1024, BCAST).iteration_time_s > 1.3 * base
    assert _run(1024, BCAST, "workload.zero1_shard_ranks=8").iteration_time_s < 1.05 * base
    assert _run(64, BCAST).iteration_time_s < _run(1024, BCAST).iteration_time_s


def test_the_group_shards_the_optimizer_states():
    """Llama-3 8B on 64 ranks: 8-rank groups hold 8x the optimizer shard of all-rank sharding,
    (1/8 - 1/64) x 12 B a parameter more; the group of all ranks is the all-gather sync's shard."""
    everyone = _run(64, BCAST).memory_per_gpu_bytes
    assert everyone == pytest.approx(_run(64).memory_per_gpu_bytes, rel=1e-12)
    eight = _run(64, BCAST, "workload.zero1_shard_ranks=8").memory_per_gpu_bytes
    P = build_scenario("llama3-8b", "single-building").model.total_params
    assert eight - everyone == pytest.approx(12.0 * P * (1 / 8 - 1 / 64), rel=2e-3)


def test_runs_rows_read_internevo_groups(tmp_path):
    p = _write(tmp_path, [
        {"zero_or_fsdp": "zero1 over all DP ranks (zero1=-1)", "framework": "other:InternEvo", "tp": "1", "dp": "64"},
        {"zero_or_fsdp": "zero1 sharded within groups of 8 GPUs (zero1=8, hybrid)", "tp": "1", "dp": "64"},
        {"zero_or_fsdp": "zero1", "tp": "1", "dp": "64"},
        {"zero_or_fsdp": "zero1 (zero1=12)", "tp": "1", "dp": "64"},
    ])
    cases, skipped = V.read_runs(p)
    got = [(c.scenario.workload.zero1_param_sync, c.scenario.workload.zero1_shard_ranks) for c in cases]
    assert got == [("broadcast", 0), ("broadcast", 8), ("all_gather", 0)]
    assert any("zero1_param_sync=broadcast" in a for a in cases[0].assumptions)
    assert len(skipped) == 1 and skipped[0]["column"] == "zero_or_fsdp" and "does not divide" in skipped[0]["reason"]


def test_megatron_launch_notes_the_difference():
    from autotune.launch import megatron_args
    s = build_scenario("llama3-8b", "single-building", gpus=64, overrides=[BCAST])
    _, notes = megatron_args(s, Config(tp=1, pp=1, dp=64, micro_batch=1, dp_flavour="zero1"))
    assert any("InternEvo" in n for n in notes)


def test_a_group_that_does_not_divide_the_data_parallel_ranks_is_refused():
    from autotune.errors import UserInputError
    s = build_scenario("llama3-8b", "single-building", gpus=64, overrides=[BCAST, "workload.zero1_shard_ranks=12",
                                                                          "workload.global_batch_seqs=512"])
    with pytest.raises(UserInputError, match="zero1_shard_ranks"):
        evaluate(s, Config(tp=1, pp=1, dp=64, micro_batch=2, dp_flavour="zero1"))
    evaluate(s, Config(tp=1, pp=1, dp=64, micro_batch=2, dp_flavour="ddp"))      # the group binds zero1 only


@pytest.mark.parametrize("model, over", [("llama3-8b", ()), ("mixtral-8x7b", ("workload.zero1_shard_ranks=8",))])
def test_batches_of_mixed_flavours_agree_with_one_row_at_a_time(model, over):
    """The broadcast term runs on the zero1 rows of a batch only (xp.on_rows): every row of a
    sampled batch of every flavour matches the scalar evaluation."""
    import numpy as np
    from autotune.configbatch import config_at
    from autotune.costmodel import evaluate_batch
    from autotune.space import SearchSpace
    s = build_scenario(model, "single-building", gpus=256, overrides=[BCAST, *over])
    space = SearchSpace(s)
    batch = space.sample(400, np.random.default_rng(0))
    out = evaluate_batch(s, batch, check=False)
    fl = np.asarray(batch["dp_flavour"])
    assert (fl == 1).any() and (fl != 1).any()
    for i in range(0, len(fl), 23):
        one = evaluate(s, config_at(batch, i), check=False)
        assert out["iteration_time_s"][i] == pytest.approx(one.iteration_time_s, rel=1e-9)
        assert out["memory_per_gpu_bytes"][i] == pytest.approx(one.memory_per_gpu_bytes, rel=1e-9)
