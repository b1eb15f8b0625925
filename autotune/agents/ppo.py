"""PPO across design points, read top to bottom (CleanRL spirit, sb3-contrib MaskablePPO).

1. Build a training set of design points (autotune.envs.design_points) and the one-step environment.
2. Train MaskablePPO on it: each episode is one design point, one configuration, one reward
   (log speedup over the production configuration).
3. Save the policy (zip) next to a small JSON card (training cost, design points seen).
4. Propose for any scenario, seen or not: its features go through the policy once (deterministic
   = zero-shot); with a budget, sample more actions from the policy and keep the best.
"""
from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path


from autotune.envs.design_points import DesignPointSet, make_point
from autotune.envs.scale_across import ACTION_SIZES, ScaleAcrossEnv

DEFAULT_POLICY = Path(__file__).resolve().parent / "policies" / "ppo_scale_across.zip"
"""The shipped policy (package data, read only): what the ``ppo`` strategy loads by default."""
TRAIN_OUT = Path("ppo-policy") / "ppo_scale_across.zip"
"""Where training writes by default: under the current directory, never into the installed package
(to ship a new policy, copy it over DEFAULT_POLICY in a source checkout)."""


def train(total_steps: int = 60_000, n_points: int = 24, seed: int = 0, out: Path = TRAIN_OUT,
          verbose: int = 0) -> dict:
    from sb3_contrib import MaskablePPO
    t0 = time.perf_counter()
    points = DesignPointSet(n_points, "train", seed)
    env = ScaleAcrossEnv(design_points=points)
    t_points = time.perf_counter() - t0
    model = MaskablePPO("MlpPolicy", env, seed=seed, verbose=verbose, n_steps=1024, batch_size=256,
                        n_epochs=10, learning_rate=3e-4, gamma=0.0, gae_lambda=1.0, ent_coef=0.01,
                        policy_kwargs={"net_arch": [128, 128]}, device="cpu")
    model.learn(total_timesteps=total_steps)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    card = {"total_steps": total_steps, "n_points": n_points, "seed": seed,
            "design_point_s": t_points, "train_s": time.perf_counter() - t0 - t_points,
            "train_scenarios": [p.scenario.summary() | {"key": p.scenario.key} for p in points.points]}
    out.with_suffix(".json").write_text(json.dumps(card, indent=2))
    return card


def load(path: Path = DEFAULT_POLICY):
    from sb3_contrib import MaskablePPO
    p = Path(path)
    if not p.exists():
        from autotune.errors import UserInputError
        raise UserInputError("--policy", str(p), "a trained policy file (python -m autotune.agents.ppo --out FILE trains one)")
    try:
        return MaskablePPO.load(p, device="cpu")
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, RuntimeError) as e:   # a file that is no policy
        from autotune.errors import UserInputError
        raise UserInputError("--policy", str(p), f"a policy file saved by MaskablePPO ({type(e).__name__})") from None


def propose(model, point, n: int = 1, seed: int = 0) -> list:
    """Configurations for a design point: the deterministic action first, then n-1 sampled ones."""
    env = ScaleAcrossEnv(design_points=_Single(point))
    obs, _ = env.reset(seed=seed)
    masks = env.action_masks()
    action, _ = model.predict(obs, action_masks=masks, deterministic=True)
    out = [env.decode(action)]
    for _ in range(n - 1):
        action, _ = model.predict(obs, action_masks=masks, deterministic=False)
        out.append(env.decode(action))
    return out


def propose_for(scenario, space=None, n: int = 1, policy=None) -> list:
    """``propose`` for a scenario with the policy file ``policy`` (default: the shipped one)."""
    return propose(load(policy or DEFAULT_POLICY), make_point(scenario, space), n=n, seed=0)


class _Single:
    def __init__(self, point):
        self.points = [point]


def point_for(scenario):
    return make_point(scenario)


__all__ = ["ACTION_SIZES", "DEFAULT_POLICY", "TRAIN_OUT", "load", "point_for", "propose", "propose_for", "train"]


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=60_000)
    ap.add_argument("--points", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(TRAIN_OUT))
    a = ap.parse_args()
    print(json.dumps({k: v for k, v in train(a.steps, a.points, a.seed, Path(a.out), verbose=0).items()
                      if k != "train_scenarios"}, indent=2))
