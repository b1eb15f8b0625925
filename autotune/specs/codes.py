"""Categorical knobs as types: one IntEnum per knob, the one home of their integer codes.

A configuration names a choice by its string (``placement: dp_out``, what users write and Optuna's
views show); the search space, the vectorised cost model, the encoding and calibration carry it as
its code, the member's integer value. Every module that compares codes imports them from here
(``Placement.DP_OUT``), never writes a bare integer. The order of the members is the order of
the choices in ``Config`` (``specs/config.py`` derives its tuples from these enums), so stored
studies and golden outputs keep their meaning.
"""
from __future__ import annotations

import enum


class Code(enum.IntEnum):
    """A knob's choice: its integer code (the value) and its name in a configuration (``label``)."""

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def labels(cls) -> tuple[str, ...]:
        return tuple(m.label for m in cls)

    @classmethod
    def of(cls, label: str) -> "Code":
        return cls[label.upper()]

    @classmethod
    def codes(cls) -> tuple[int, ...]:
        """The members' codes as plain ints, in member order, for the cost model's hot path:
        comparing an array with an IntEnum member makes numpy probe the member's type for its
        array protocols (EnumType.__getattr__ raising AttributeError), about 2% of
        ``evaluate_batch``; a plain int is compared directly."""
        return tuple(int(m) for m in cls)


class Placement(Code):
    """Which parallel dimension spans buildings (hybrid: buildings split over both dp and pp)."""
    DP_OUT = 0
    PP_OUT = 1
    HYBRID = 2
    EP_OUT = 3
    CP_OUT = 4


class DPFlavour(Code):
    DDP = 0
    ZERO1 = 1
    FSDP = 2
    HSDP = 3


class PPSchedule(Code):
    GPIPE = 0
    ONE_F_ONE_B = 1
    INTERLEAVED_1F1B = 2
    ZB1P = 3
    ZB2P = 4
    ZBV = 5
    DUALPIPEV = 6

    @property
    def label(self) -> str:
        return "1f1b" if self is PPSchedule.ONE_F_ONE_B else self.name.lower()

    @classmethod
    def of(cls, label: str) -> "PPSchedule":
        return cls.ONE_F_ONE_B if label == "1f1b" else cls[label.upper()]


class HeteroSplit(Code):
    """How work is shared between buildings of different GPU speeds: even (every rank at the
    slowest GPU's pace) or by_speed (DP replicas take micro-batches, pipeline stages take layers,
    in proportion to their building's speed)."""
    EVEN = 0
    BY_SPEED = 1


class Recompute(Code):
    NONE = 0
    SELECTIVE = 1
    FULL = 2


class LoadBalancing(Code):
    ECMP = 0
    QP_SPRAY = 1
    PACKET_SPRAY = 2


class LossRecovery(Code):
    GBN = 0
    SR = 1


class Collective(Code):
    NCCL_AUTO = 0
    RING = 1
    TREE = 2
    HIERARCHICAL = 3


class Protocol(Code):
    """NCCL_PROTO: auto = NCCL's tuner picks per collective by size."""
    AUTO = 0
    SIMPLE = 1
    LL128 = 2
    LL = 3


BY_FIELD = {"placement": Placement, "dp_flavour": DPFlavour, "pp_schedule": PPSchedule, "recompute": Recompute,
            "xb_load_balancing": LoadBalancing, "xb_loss_recovery": LossRecovery, "collective": Collective,
            "nccl_protocol": Protocol}
"""The Config field each enum codes."""
