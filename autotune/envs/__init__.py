"""Gymnasium environments of autotune. ``import autotune`` registers ``autotune/ScaleAcross-v0``
when gymnasium is installed (the ``rl`` extra), so ``gymnasium.make("autotune/ScaleAcross-v0")``
works without importing this package by hand."""
from .scale_across import ScaleAcrossEnv

ENV_ID = "autotune/ScaleAcross-v0"

__all__ = ["ENV_ID", "ScaleAcrossEnv"]
