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


ENV_ID = "autotune/ScaleAcross-v0"


def _register(gymnasium) -> None:
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="autotune.envs.scale_across:ScaleAcrossEnv")


def _register_envs() -> None:
    """Make ``gymnasium.make("autotune/ScaleAcross-v0")`` work after ``import autotune`` without
    importing gymnasium here (it would cost every command ~0.1-0.2 s of start-up): register now if
    gymnasium is loaded already, else the moment it is imported (a one-shot meta-path hook that
    runs gymnasium's own loader, then registers). The entry point is a string: the environment
    module loads on first make."""
    import sys
    if "gymnasium" in sys.modules:
        _register(sys.modules["gymnasium"])
        return
    import importlib.abc
    import importlib.util

    class _Loader(importlib.abc.Loader):
        def __init__(self, inner):
            self.inner = inner

        def create_module(self, spec):
            return self.inner.create_module(spec)

        def exec_module(self, module):
            self.inner.exec_module(module)
            _register(module)

    class _Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "gymnasium":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
            return spec

    sys.meta_path.insert(0, _Hook())


_register_envs()
