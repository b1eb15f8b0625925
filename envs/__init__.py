"""The design card's ``envs/`` folder: a thin shim for scripts run from a source checkout. The
environments live in ``autotune.envs`` (installed with the package; ``import autotune`` registers
``autotune/ScaleAcross-v0``). This folder is not installed, so no top-level ``envs`` package can
collide with a user's own."""
import sys

import autotune  # noqa: F401  (registers the environment with gymnasium)
from autotune.envs import *  # noqa: F401,F403
from autotune.envs import design_points, scale_across

sys.modules[__name__ + ".design_points"] = design_points
sys.modules[__name__ + ".scale_across"] = scale_across
