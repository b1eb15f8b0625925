"""The design card's ``agents/`` folder: a thin shim for scripts run from a source checkout. The
agents live in ``autotune.agents`` (installed with the package); this folder is not installed, so
no top-level ``agents`` package can collide with a user's own."""
import sys

from autotune.agents import ppo, ppo_strategy

sys.modules[__name__ + ".ppo"] = ppo
sys.modules[__name__ + ".ppo_strategy"] = ppo_strategy
