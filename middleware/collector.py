"""Collectors: step vectorized envs with one batched policy forward per step.

One ``StepCollector`` call, for ``E`` envs and ``T = ceil(n_sample / E)`` vector steps:

1. for each vector step: one batched ``policy.forward(obs, **ctx.collect_kwargs)`` on the numpy
   observations (the policy returns numpy arrays or tensors); one ``env.step``;
   the step's arrays go into preallocated ``[T, E]`` numpy buffers; where an episode ended, the real
   final observation (``info["final_obs"]``, gymnasium's SAME_STEP autoreset) becomes ``next_obs``;
2. the chunk is turned into n-step transitions per env stream (``NStepBuilder``);
3. ``ctx.trajectories`` gets them as one treetensor batch; ``ctx.env_step``, ``ctx.env_episode``,
   ``ctx.episode_returns`` and ``ctx.collect_stats`` are updated.
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import torch

from ._treetensor import to_tree
from .replay.nstep import NStepBuilder

__all__ = ["StepCollector", "EpisodeCollector"]


def to_numpy(value: Any) -> np.ndarray:
    """Policy outputs as numpy: tensors (on any device) are detached and copied to the CPU."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


class _EnvRunner:
    """What both collectors share: the current observations, seeding, and per-env episode returns."""

    def __init__(self, policy: Any, env: Any, seed: int) -> None:
        self.policy = policy
        self.env = env
        self.num_envs = env.num_envs
        self.seed = seed
        self.obs: Optional[np.ndarray] = None
        self.ep_return = np.zeros(self.num_envs, dtype=np.float64)

    def current_obs(self) -> np.ndarray:
        if self.obs is None:
            self.obs, _ = self.env.reset(seed=[self.seed + i for i in range(self.num_envs)])
        return self.obs

    def step(self, obs: np.ndarray, collect_kwargs: Mapping[str, Any]):
        """One batched act + env step. Returns (policy output, action as numpy, real next_obs, reward,
        terminated, truncated, returns of the episodes that just finished)."""
        out = self.policy.forward(obs, **collect_kwargs)
        action = out["action"]
        if type(action) is not np.ndarray:
            action = to_numpy(action)
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        self.ep_return += reward
        real_next = next_obs
        finished: List[float] = []
        if terminated.any() or truncated.any():
            done = terminated | truncated
            real_next = next_obs.copy()
            final = info["final_obs"]
            for i in np.flatnonzero(done):
                real_next[i] = final[i]
                finished.append(float(self.ep_return[i]))
            self.ep_return[done] = 0.0
        self.obs = next_obs
        return out, action, real_next, reward, terminated, truncated, finished


class StepCollector:
    """Collect ``policy.collect.n_sample`` transitions per call into ``ctx.trajectories``.

    Args:
        cfg: the compiled config; reads ``policy.collect.n_sample``, ``policy.nstep``,
            ``policy.discount_factor`` and ``seed``.
        policy: ``policy.collect_mode``.
        env: a gymnasium vector env in SAME_STEP autoreset mode (``engine.envs.make_vector_env``).
        seed: seed of env 0 (env i gets ``seed + i``); defaults to ``cfg.seed``.
        time_major: the on-policy mode: keep ``ctx.trajectories`` as one-step ``[T, E]`` chunks, with
            whatever else the policy returned (log-probs, values), for GAE; no n-step.
    """

    def __init__(self, cfg: Mapping[str, Any], policy: Any, env: Any, seed: Optional[int] = None,
                 time_major: bool = False) -> None:
        self._time_major = time_major
        pcfg = cfg["policy"]
        self._runner = _EnvRunner(policy, env, cfg["seed"] if seed is None else seed)
        n_sample = int(pcfg["collect"]["n_sample"])
        if n_sample <= 0:
            raise ValueError(f"policy.collect.n_sample must be positive, got {n_sample}")
        self.num_envs = env.num_envs
        self.steps_per_call = math.ceil(n_sample / self.num_envs)
        self._nstep = None if time_major else NStepBuilder(int(pcfg["nstep"]), float(pcfg["discount_factor"]))
        obs_space = env.single_observation_space
        self._obs_shape = tuple(obs_space.shape)
        self._obs_dtype = obs_space.dtype

    def __call__(self, ctx: Any) -> None:
        start = time.perf_counter()
        runner = self._runner
        steps, envs = self.steps_per_call, self.num_envs
        obs_buf = np.empty((steps, envs) + self._obs_shape, dtype=self._obs_dtype)
        next_buf = np.empty_like(obs_buf)
        reward_buf = np.empty((steps, envs), dtype=np.float32)
        term_buf = np.empty((steps, envs), dtype=bool)
        trunc_buf = np.empty((steps, envs), dtype=bool)
        extras: Dict[str, List[torch.Tensor]] = {}
        actions: List[np.ndarray] = []
        returns: List[float] = []
        obs = runner.current_obs()
        kwargs = ctx.collect_kwargs
        for t in range(steps):
            out, action, real_next, reward, term, trunc, finished = runner.step(obs, kwargs)
            obs_buf[t] = obs
            next_buf[t] = real_next
            actions.append(action)
            reward_buf[t] = reward
            term_buf[t] = term
            trunc_buf[t] = trunc
            if len(out) > 1:  # log-probs, values, raw actions of on-policy and continuous policies
                for key, value in out.items():
                    if key != "action":
                        extras.setdefault(key, []).append(value)
            if finished:
                returns.extend(finished)
            obs = runner.obs
        chunk = {"obs": torch.from_numpy(obs_buf), "action": torch.from_numpy(np.stack(actions)),
                 "reward": torch.from_numpy(reward_buf), "next_obs": torch.from_numpy(next_buf),
                 "terminated": torch.from_numpy(term_buf), "truncated": torch.from_numpy(trunc_buf)}
        for key, values in extras.items():
            chunk[key] = torch.as_tensor(np.stack([to_numpy(v) for v in values]))
        if self._time_major:
            transitions = chunk
            samples = steps * envs
        else:
            transitions = self._nstep.push(chunk)
            samples = len(transitions.get("reward", ()))
        ctx.trajectories = to_tree(transitions) if transitions else None
        env_steps = steps * envs
        ctx.env_step += env_steps
        ctx.env_episode += len(returns)
        ctx.episode_returns = returns
        ctx.collect_stats = {"samples": samples, "env_steps": env_steps,
                             "episodes": len(returns), "duration": time.perf_counter() - start}


class EpisodeCollector:
    """Collect ``n_episode`` whole episodes per call into ``ctx.episodes`` (a list of treetensor
    episodes, one-step transitions each) and their concatenation into ``ctx.trajectories``.

    Episodes in progress when a call ends carry over to the next call, per env.
    """

    def __init__(self, cfg: Mapping[str, Any], policy: Any, env: Any, n_episode: Optional[int] = None,
                 seed: Optional[int] = None) -> None:
        self._runner = _EnvRunner(policy, env, cfg["seed"] if seed is None else seed)
        self.n_episode = int(n_episode or cfg["policy"]["collect"].get("n_episode", env.num_envs))
        self._gamma = float(cfg["policy"]["discount_factor"])
        self._open: List[List[Dict[str, Any]]] = [[] for _ in range(env.num_envs)]

    def __call__(self, ctx: Any) -> None:
        start = time.perf_counter()
        runner = self._runner
        episodes: List[Any] = []
        returns: List[float] = []
        env_steps = 0
        while len(episodes) < self.n_episode:
            obs = runner.current_obs()
            out, action, real_next, reward, term, trunc, finished = runner.step(obs, ctx.collect_kwargs)
            env_steps += runner.num_envs
            for i in range(runner.num_envs):
                self._open[i].append({"obs": obs[i], "action": action[i], "reward": np.float32(reward[i]),
                                      "next_obs": real_next[i], "terminated": bool(term[i]),
                                      "truncated": bool(trunc[i])})
                if term[i] or trunc[i]:
                    if len(episodes) < self.n_episode:
                        episodes.append(self._to_episode(self._open[i]))
                    self._open[i] = []
            returns.extend(finished)
        ctx.episodes = episodes
        ctx.trajectories = to_tree({k: torch.cat([getattr(e, k) for e in episodes])
                                    for k in ("obs", "action", "reward", "next_obs", "terminated",
                                              "truncated", "discount")})
        ctx.env_step += env_steps
        ctx.env_episode += len(returns)
        ctx.episode_returns = returns
        ctx.collect_stats = {"samples": len(ctx.trajectories.reward), "env_steps": env_steps,
                             "episodes": len(returns), "duration": time.perf_counter() - start}

    def _to_episode(self, steps: List[Dict[str, Any]]) -> Any:
        data = {k: torch.as_tensor(np.stack([s[k] for s in steps])) for k in steps[0]}
        data["discount"] = torch.full((len(steps),), self._gamma)
        return to_tree(data)
