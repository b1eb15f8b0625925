"""autotune: find the fastest scale-across training configuration, and show why."""
from .specs import Config, Scenario, build_scenario

__all__ = ["Config", "Scenario", "build_scenario"]
