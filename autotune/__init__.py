"""autotune: find the fastest scale-across training configuration, and show why."""

__all__ = ["Config", "CostParams", "Evaluation", "Scenario", "SearchSpace", "build_scenario", "evaluate", "run_study",
           "evaluate_batch"]

_LAZY = {"Config": ".specs", "Scenario": ".specs", "build_scenario": ".specs", "SearchSpace": ".space",
         "CostParams": ".costmodel", "Evaluation": ".costmodel", "evaluate": ".costmodel",
         "evaluate_batch": ".costmodel", "run_study": ".study"}


def __getattr__(name):
    """Every public name loads on first use, so ``autotune --help`` does not import the cost model
    (numpy, scipy), Optuna or MLflow."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def _register_envs() -> None:
    """Register ``autotune/ScaleAcross-v0`` with gymnasium's registry when gymnasium is installed
    (the ``rl`` extra). The entry point is a string: the environment module loads on first make."""
    import importlib.util
    if importlib.util.find_spec("gymnasium") is None:
        return
    import gymnasium
    if "autotune/ScaleAcross-v0" not in gymnasium.registry:
        gymnasium.register(id="autotune/ScaleAcross-v0", entry_point="autotune.envs.scale_across:ScaleAcrossEnv")


_register_envs()
