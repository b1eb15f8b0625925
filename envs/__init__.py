"""Gymnasium environments of autotune. ``import envs`` registers ``autotune/ScaleAcross-v0``."""
import gymnasium as gym

from .scale_across import ScaleAcrossEnv

if "autotune/ScaleAcross-v0" not in gym.registry:
    gym.register(id="autotune/ScaleAcross-v0", entry_point="envs.scale_across:ScaleAcrossEnv")

__all__ = ["ScaleAcrossEnv"]
