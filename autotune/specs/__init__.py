"""Validated, immutable specs: model, hardware, cluster, workload, scenario, configuration."""
from .cluster import BuildingSpec, ClusterSpec, TierSpec
from .config import Config
from .hardware import HardwareSpec
from .model import ModelSpec
from .presets import build_scenario, load_preset, preset_names
from .scenario import Scenario
from .workload import WorkloadSpec

__all__ = ["BuildingSpec", "ClusterSpec", "TierSpec", "Config", "HardwareSpec", "ModelSpec",
           "Scenario", "WorkloadSpec", "build_scenario", "load_preset", "preset_names"]
