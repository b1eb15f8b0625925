"""PPO across design points, read top to bottom (CleanRL spirit, sb3-contrib MaskablePPO).

1. Build a training set of design points (autotune.envs.design_points): the "train" grid over the
   preset hardware, plus generated points of other and mixed hardware ("unseen" generator, seeds
   disjoint from every evaluation seed), and the one-step environment.
2. Imitation first: the policy's log-likelihood of each training point's exact top configurations
   (``exhaustive_search``, encoded as actions) is maximised for a few epochs, so PPO starts from
   what the exact search knows instead of from uniform noise over 17 knobs.
3. Then MaskablePPO: each episode is one design point, one configuration, one reward (log
   speedup over the production configuration).
4. Save the policy (zip) next to a small JSON card (training cost, design points seen).
5. Propose for any scenario, seen or not: its features go through the policy once (deterministic
   = the raw zero-shot action); the one-shot proposal a study measures first is the fastest, by
   the cost model, of that action and ``RANK_DRAWS`` draws of the policy at ``RANK_TEMPERATURE``
   (``ranked_proposal``: no real trial is spent choosing it); with a budget, sample more actions
   from the policy and keep the best.
"""
from __future__ import annotations

import json
import math
import time
import zipfile
from pathlib import Path

import numpy as np

from autotune.envs.design_points import DesignPointSet, make_point
from autotune.envs.scale_across import ACTION_SIZES, ScaleAcrossEnv

DEFAULT_POLICY = Path(__file__).resolve().parent / "policies" / "ppo_scale_across.zip"
"""The shipped policy (package data, read only): what the ``ppo`` strategy loads by default."""
TRAIN_OUT = Path("ppo-policy") / "ppo_scale_across.zip"
"""Where training writes by default: under the current directory, never into the installed package
(to ship a new policy, copy it over DEFAULT_POLICY in a source checkout)."""


RANK_DRAWS = 256
"""Policy draws the one-shot proposal is chosen among, by the cost model (``ranked_proposal``)."""
RANK_TEMPERATURE = 2.0
"""Softmax temperature of those draws (each knob's logits divided by it). Chosen on the validation
set (32 generated unseen points, seed 7; never the test seed), median gap with 256 draws
(``experiments/ppo_zero_shot.py --test-points 32 --test-seed 7 --temperature T``; results in
``experiments/results/ppo_zero_shot_ranked_validation32_T*.json``): T 1 -> 2.04% (19 distinct
candidates a point), {1, 2} split evenly -> 1.52% (50), {1, 2, 4} -> 1.22% (111), 2 -> 1.22% (82): a tie
with {1, 2, 4}, and one temperature is the simpler rule. At 1 the policy is too sure of itself on
some points: every draw repeats one wrong knob."""
UNSEEN_TRAIN_SEED_OFFSET = 1000
"""Generated ("unseen"-generator) training points use seed + this: evaluation sets use seeds below it."""


class _Points:
    def __init__(self, points):
        self.points = list(points)


def action_for(env, config) -> np.ndarray:
    """The action that decodes to ``config`` in ``env``'s current design point (its knobs'
    indices, ``FlatEncoding.encode``, mapped onto the fixed action sizes), or None where the
    fixed sizes cannot reach it."""
    idx = env.point.encoding.encode(config)
    enc = env.point.encoding
    a = []
    for k in env.names:
        size, n = enc.sizes[enc.names.index(k)], ACTION_SIZES[k]
        a.append(min(n - 1, -(-idx[k] * n // size)))       # ceil: decode floors back to idx[k]
    a = np.array(a, dtype=np.int64)
    return a if env.decode(a) == config else None


def imitation_data(points, top_k: int) -> tuple:
    """(observations, actions, masks) of every training point's exact top ``top_k`` configurations."""
    from autotune.strategies.exhaustive import exhaustive_search
    env = ScaleAcrossEnv(design_points=points)
    obs, acts, masks = [], [], []
    for i, p in enumerate(points.points):
        o, _ = env.reset(options={"index": i})
        m = env.action_masks()
        for cfg, _ in exhaustive_search(p.space, top_k=top_k, workers=1).top:
            a = action_for(env, cfg)
            if a is not None:
                obs.append(o), acts.append(a), masks.append(m)
    return np.array(obs), np.array(acts), np.array(masks)


def imitate(model, data, epochs: int, lr: float = 1e-3, seed: int = 0) -> float:
    """Maximise the policy's log-likelihood of ``data``'s actions (behaviour cloning), in place;
    returns the last epoch's mean negative log-likelihood."""
    import torch
    obs, acts, masks = (torch.as_tensor(x) for x in data)
    opt = torch.optim.Adam(model.policy.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    loss_v = float("nan")
    for _ in range(epochs):
        perm, total = torch.randperm(len(obs), generator=g), 0.0
        for j in range(0, len(obs), 256):
            b = perm[j:j + 256]
            _, logp, _ = model.policy.evaluate_actions(obs[b], acts[b], action_masks=masks[b])
            loss = -logp.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(b)
        loss_v = total / len(obs)
    return loss_v


def train(total_steps: int = 60_000, n_points: int = 24, seed: int = 0, out: Path = TRAIN_OUT,
          verbose: int = 0, n_generated: int = 0, imitation_top_k: int = 4, imitation_epochs: int = 0) -> dict:
    """PPO over ``n_points`` grid points and ``n_generated`` generated ones; with
    ``imitation_epochs`` > 0, behaviour cloning of the exact top ``imitation_top_k`` first."""
    from sb3_contrib import MaskablePPO
    t0 = time.perf_counter()
    points = _Points(DesignPointSet(n_points, "train", seed).points +
                     (DesignPointSet(n_generated, "unseen", UNSEEN_TRAIN_SEED_OFFSET + seed).points if n_generated else []))
    env = ScaleAcrossEnv(design_points=points)
    t_points = time.perf_counter() - t0
    # after imitation, PPO refines: a smaller step and no entropy bonus keep it near what it imitated
    # (chosen on a validation set of generated points, seed 7, never the test seed)
    lr, ent, arch = (1e-4, 0.0, [512, 512]) if imitation_epochs else (3e-4, 0.01, [128, 128])
    model = MaskablePPO("MlpPolicy", env, seed=seed, verbose=verbose, n_steps=1024, batch_size=256,
                        n_epochs=10, learning_rate=lr, gamma=0.0, gae_lambda=1.0, ent_coef=ent,
                        policy_kwargs={"net_arch": arch}, device="cpu")
    nll = None
    if imitation_epochs:
        nll = imitate(model, imitation_data(points, imitation_top_k), imitation_epochs, seed=seed)
    t_imitation = time.perf_counter() - t0 - t_points
    if total_steps:
        model.learn(total_timesteps=total_steps)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    card = {"total_steps": total_steps, "n_points": n_points, "n_generated": n_generated, "seed": seed,
            "imitation_epochs": imitation_epochs, "imitation_top_k": imitation_top_k, "imitation_nll": nll,
            "design_point_s": t_points, "imitation_s": t_imitation,
            "train_s": time.perf_counter() - t0 - t_points - t_imitation,
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
    except (OSError, ValueError, KeyError, AssertionError, zipfile.BadZipFile, RuntimeError) as e:   # no policy
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


MAX_TEMPERATURE = 100.0
"""Largest softmax temperature ``draw_actions`` takes (beyond it the draws are uniform in effect)."""


def _temperatures(temperature) -> tuple:
    """``temperature`` as a tuple of finite values in (0, MAX_TEMPERATURE]; a ValueError otherwise."""
    ts = tuple(temperature) if isinstance(temperature, (tuple, list)) else (temperature,)
    if not ts or not all(isinstance(t, (int, float)) and math.isfinite(t) and 0 < t <= MAX_TEMPERATURE for t in ts):
        raise ValueError(f"temperature {temperature!r}: finite values in (0, {MAX_TEMPERATURE:g}]")
    return tuple(float(t) for t in ts)


def draw_actions(model, obs, masks, n: int, temperature=RANK_TEMPERATURE, seed: int = 0) -> np.ndarray:
    """``n`` actions drawn from the policy's per-knob categorical distributions with each knob's
    logits divided by ``temperature``; a tuple of temperatures splits the ``n`` draws evenly
    between them. Masked indices are excluded after the division (never drawn at any
    temperature). The same ``seed`` gives the same draws."""
    import torch
    ts = _temperatures(temperature)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        dist = model.policy.get_distribution(torch.as_tensor(obs[None]), action_masks=masks[None])
        knob_masks = torch.split(torch.as_tensor(np.asarray(masks, dtype=bool)),
                                 [len(d.logits[0]) for d in dist.distributions])
        parts = []
        for k, t in enumerate(ts):
            m = n // len(ts) + (1 if k < n % len(ts) else 0)
            if not m:
                continue
            cols = [torch.multinomial(torch.softmax(torch.where(mk, d.logits[0] / t, -torch.inf), -1), m,
                                      replacement=True, generator=g).numpy()
                    for d, mk in zip(dist.distributions, knob_masks)]
            parts.append(np.stack(cols, axis=1))
    return np.concatenate(parts) if parts else np.zeros((0, len(knob_masks)), dtype=np.int64)


def scored_candidates(env, point, actions, params=None) -> tuple:
    """(distinct configurations, modelled times with inf where one does not fit): ``actions``
    decoded in ``env``'s design point, duplicates dropped in first-seen order, one cost-model batch."""
    from autotune.configbatch import batch_from_configs
    from autotune.costmodel import evaluate_batch
    configs = list({c.model_dump_json(): c for c in (env.decode(np.array(a)) for a in dict.fromkeys(actions))}.values())
    out = evaluate_batch(point.scenario, batch_from_configs(configs), params, check=False)
    return configs, np.where(out["feasible"], out["iteration_time_s"], np.inf)


def ranked_proposal(model, point, draws: int = RANK_DRAWS, temperature=RANK_TEMPERATURE, params=None) -> tuple:
    """The one-shot proposal: the policy's deterministic action and ``draws`` draws at
    ``temperature`` (a fixed seed: the answer depends on the policy and the design point only, so a
    study's first PPO trial, ``autotune propose`` and ``compare`` agree), decoded (every one legal
    and fitting by the memory model), the distinct configurations scored by the cost model
    (``params``; default and what those three use: the shipped calibration) in one batch, the
    fastest that fits kept (else the deterministic one). Returns (config, info): info has the
    deterministic configuration, the number of distinct candidates and the chosen one's modelled
    time (inf where it does not fit). ``draws`` 0: the raw action."""
    env = ScaleAcrossEnv(design_points=_Single(point))
    obs, _ = env.reset(seed=0)
    masks = env.action_masks()
    det, _ = model.predict(obs, action_masks=masks, deterministic=True)
    actions = [tuple(np.asarray(det).tolist())]
    if draws:
        actions += [tuple(a) for a in draw_actions(model, obs, masks, draws, temperature, seed=0).tolist()]
    configs, t = scored_candidates(env, point, actions, params)
    i = int(np.argmin(t)) if np.isfinite(t).any() else 0
    return configs[i], {"deterministic": configs[0], "candidates": len(configs), "model_time_s": float(t[i]),
                        "draws": draws, "temperature": temperature}


def propose_for(scenario, space=None, n: int = 1, policy=None) -> list:
    """``propose`` for a scenario with the policy file ``policy`` (default: the shipped one)."""
    return propose(load(policy or DEFAULT_POLICY), make_point(scenario, space), n=n, seed=0)


class _Single:
    def __init__(self, point):
        self.points = [point]


def point_for(scenario):
    return make_point(scenario)


__all__ = ["ACTION_SIZES", "DEFAULT_POLICY", "RANK_DRAWS", "RANK_TEMPERATURE", "TRAIN_OUT", "draw_actions", "load",
           "point_for", "propose", "propose_for", "ranked_proposal", "train"]


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
