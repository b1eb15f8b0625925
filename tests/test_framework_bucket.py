"""Default gradient buckets by framework class (dp_bucket_mib = 0): Megatron-Core max(40M, 1M x dp x cp)
parameters (one bucket without DP overlap), DeepSpeed 500M elements, torch DDP 25 MiB; an
explicit dp_bucket_mib wins; FSDP and HSDP reduce per unit, not per bucket."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from autotune.configparse import make_config
from autotune.costmodel.iteration import _scalar_row
from autotune.costmodel.params import default_params
from autotune.costmodel.scenario_consts import framework_bucket, scenario_consts
from autotune.costmodel.terms import dp_comm_groups
from autotune.costmodel.xp import SCALAR
from autotune.specs import build_scenario

BASE = dict(tp=4, cp=1, ep=1, pp=1, placement="dp_out", pp_schedule="1f1b", pp_chunks=1, recompute="full",
            micro_batch=1, collective="ring", nccl_protocol="simple")


def calls(framework: str, dp: int, flavour: str = "zero1", bucket_mib: int = 0, cp: int = 1, overlap: int = 1) -> float:
    sc = build_scenario("llama3-8b", "single-building", global_batch=8192, gpus=4 * dp * cp)
    sc = sc.with_workload(framework=framework)
    p = default_params()
    cfg = make_config({**BASE, "dp": dp, "cp": cp, "dp_flavour": flavour, "dp_bucket_mib": bucket_mib,
                       "overlap_dp": overlap}, 8192)
    return float(dp_comm_groups(scenario_consts(sc, p), p, _scalar_row(cfg), SCALAR)[0].calls)


def grad_bytes(dp: int, framework: str = "megatron") -> float:
    """The dense gradient bytes one DP rank reduces (llama3-8b over tp 4, pp 1, bf16 training:
    Megatron reduces its fp32 gradient buffer, 4 B a parameter)."""
    return calls(framework, dp, bucket_mib=1) * 2**20   # 1 MiB buckets: calls = ceil(bytes / 1 MiB)


@pytest.mark.parametrize("dp", [8, 64, 512, 2048])
def test_megatron_bucket_grows_with_data_parallel_size(dp):
    g = grad_bytes(dp)
    want = math.ceil(g / (max(40e6, 1e6 * dp) * 4.0))          # Megatron's bucket: parameters
    assert calls("megatron", dp) == pytest.approx(want, abs=1)


def test_framework_defaults():
    assert framework_bucket("megatron", 2.0) == {"bucket_min_bytes": 80e6, "bucket_bytes_per_rank": 2e6,
                                                 "ddp_bucket_bytes": 0.0}
    assert framework_bucket("deepspeed", 2.0)["bucket_min_bytes"] == 1e9
    assert framework_bucket("nanotron", 2.0)["bucket_min_bytes"] == 25 * 2**20
    torch = framework_bucket("pytorch", 2.0)
    assert torch["ddp_bucket_bytes"] == 25 * 2**20 and torch["bucket_min_bytes"] == 80e6
    # torch DDP buckets only the DDP flavour; a pytorch-class ZeRO-1 keeps 80 MB
    assert calls("pytorch", 64, "ddp") > calls("pytorch", 64, "zero1")


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([8, 16, 64, 256, 1024]), st.sampled_from(["megatron", "deepspeed", "pytorch", "jax"]),
       st.sampled_from([8, 64, 512]))
def test_explicit_bucket_wins_and_calls_never_grow_with_dp(dp, framework, mib):
    # (the bytes of the framework's own reduction: fp32 for Megatron's buffer and pytorch, bf16 for the rest)
    assert calls(framework, dp, bucket_mib=mib) == math.ceil(grad_bytes(dp, framework) / (mib * 2**20))
    assert calls(framework, 2 * dp) <= calls(framework, dp)


def test_megatron_counts_context_parallel_ranks_and_one_bucket_without_overlap():
    g = grad_bytes(512)
    # dp 256 x cp 2 = 512 data-parallel ranks: the bucket of dp 512
    assert calls("megatron", 256, cp=2) == math.ceil(g / (512e6 * 4.0))
    assert calls("megatron", 256, cp=2) < calls("megatron", 256)
    assert calls("megatron", 64, overlap=0) == 1 and calls("megatron", 64) > 1
    assert calls("pytorch", 64, "ddp", overlap=0) > 1     # torch DDP keeps its buckets


def test_buckets_by_class_and_flavour():
    assert calls("nanotron", 64) == math.ceil(grad_bytes(64) / (25 * 2**20)) > calls("jax", 64)
    assert calls("megatron", 64, "ddp") == calls("megatron", 64) < calls("pytorch", 64, "ddp")
    for flavour in ("fsdp", "hsdp"):     # per FSDP unit, whatever the bucket
        assert calls("megatron", 64, flavour) == calls("megatron", 64, flavour, bucket_mib=1) \
            == calls("pytorch", 64, flavour)
