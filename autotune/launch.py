"""What a configuration's transport knobs mean to the software that runs them: NCCL environment
variables and framework options, printed with every best configuration.

NCCL names: docs/env.rst of NVIDIA/nccl 2.30 (NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS,
NCCL_MAX_NCHANNELS, NCCL_BUFFSIZE, NCCL_IB_QPS_PER_CONNECTION); Megatron-LM's
``--ddp-bucket-size`` (parameters per bucket). Load balancing and loss recovery are fabric and NIC
settings (switch ECMP / adaptive routing, the NIC's retransmission mode), not NCCL variables: they
are reported as such.
"""
from __future__ import annotations

from .specs.config import Config

_ALGO = {"nccl_auto": None, "ring": "Ring", "tree": "Tree", "hierarchical": None}
_PROTO = {"auto": None, "simple": "Simple", "ll128": "LL128", "ll": "LL"}


def nccl_env(cfg: Config) -> dict[str, str]:
    """Environment variables that make NCCL run the configuration's transport (unset = default)."""
    env = {}
    if _ALGO[cfg.collective]:
        env["NCCL_ALGO"] = _ALGO[cfg.collective]
    if _PROTO[cfg.nccl_protocol]:
        env["NCCL_PROTO"] = _PROTO[cfg.nccl_protocol]
    env["NCCL_MIN_NCHANNELS"] = env["NCCL_MAX_NCHANNELS"] = str(cfg.nccl_channels)
    env["NCCL_BUFFSIZE"] = str(cfg.nccl_buffer_mib * 2**20)
    if cfg.xb_load_balancing != "packet_spray":
        env["NCCL_IB_QPS_PER_CONNECTION"] = str(cfg.xb_queue_pairs)
    return env


def transport_notes(cfg: Config) -> list[str]:
    """The knobs that are not NCCL variables, in words."""
    notes = []
    if cfg.collective == "hierarchical":
        notes.append("hierarchical collectives: the framework's two-level process groups (HSDP / NCCLX-style), "
                     "not an NCCL_ALGO value")
    notes.append({"ecmp": "cross-building load balancing: switch ECMP hashing (enhanced ECMP hashes the QP)",
                  "qp_spray": "cross-building load balancing: host spreads messages over QPs (NCCLX dqplb-style)",
                  "packet_spray": "cross-building load balancing: switch packet spraying / adaptive routing"}
                 [cfg.xb_load_balancing])
    notes.append({"gbn": "loss recovery: go-back-N (RoCE RC default)",
                  "sr": "loss recovery: selective repeat (NIC selective retransmission)"}[cfg.xb_loss_recovery])
    if cfg.dp_bucket_mib:
        notes.append(f"gradient buckets: Megatron-LM --ddp-bucket-size {cfg.dp_bucket_mib * 2**20 // 2} "
                     f"(parameters; {cfg.dp_bucket_mib} MiB of bf16 gradients), PyTorch DDP bucket_cap_mb={cfg.dp_bucket_mib}")
    return notes


def launch_summary(cfg: Config) -> dict:
    return {"nccl_env": nccl_env(cfg), "notes": transport_notes(cfg)}
