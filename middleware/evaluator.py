"""Evaluation by interaction: greedy episodes on envs kept apart from the collector's."""
from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from .collector import to_numpy

__all__ = ["interaction_evaluator", "InteractionEvaluator", "evaluate_episodes", "NewEvaluation"]


def evaluate_episodes(policy: Any, env: Any, n_episode: int, seed: int) -> Dict[str, Any]:
    """Run ``n_episode`` episodes of ``policy`` (eval mode) on vector ``env``; returns returns and lengths.

    The episodes are split evenly over the envs before starting (env i runs its own quota), so short
    episodes cannot crowd out long ones and bias the mean.
    """
    num_envs = env.num_envs
    quota = np.array([n_episode // num_envs + (i < n_episode % num_envs) for i in range(num_envs)])
    done_count = np.zeros(num_envs, dtype=np.int64)
    ep_return = np.zeros(num_envs)
    ep_length = np.zeros(num_envs, dtype=np.int64)
    returns: List[float] = []
    lengths: List[int] = []
    obs, _ = env.reset(seed=[seed + i for i in range(num_envs)])
    while (done_count < quota).any():
        action = to_numpy(policy.forward(obs)["action"])
        obs, reward, terminated, truncated, _ = env.step(action)
        ep_return += reward
        ep_length += 1
        for i in np.flatnonzero(terminated | truncated):
            if done_count[i] < quota[i]:
                returns.append(float(ep_return[i]))
                lengths.append(int(ep_length[i]))
                done_count[i] += 1
            ep_return[i] = 0.0
            ep_length[i] = 0
    return {"returns": returns, "lengths": lengths}


class NewEvaluation:
    """Answers, for one middleware, whether an evaluation happened since it last asked (loggers, savers
    and the summary react to each evaluation once)."""

    def __init__(self) -> None:
        self._seen_iter = -1

    def __call__(self, ctx: Any) -> bool:
        if ctx.eval_output is None or ctx.last_eval_iter == self._seen_iter:
            return False
        self._seen_iter = ctx.last_eval_iter
        return True


class InteractionEvaluator:
    """After the first update and then every ``policy.eval.evaluator.eval_freq`` train iterations, run
    ``env.n_evaluator_episode`` episodes and write ``ctx.eval_value`` (mean return), ``ctx.eval_output``,
    ``ctx.last_eval_iter`` and ``ctx.last_eval_value``. When the mean reaches ``env.stop_value`` the task
    finishes with ``ctx.stop_reason = "stop_value"``.

    Each evaluation starts its envs from new seeds, so successive evaluations see different starts.
    """

    def __init__(self, cfg: Mapping[str, Any], policy: Any, env: Any, seed: Optional[int] = None) -> None:
        self._policy = policy
        self._env = env
        self._eval_freq = int(cfg["policy"]["eval"]["evaluator"]["eval_freq"])
        self._n_episode = int(cfg["env"]["n_evaluator_episode"])
        self._stop_value = float(cfg["env"]["stop_value"])
        self._seed = (cfg["seed"] if seed is None else seed) + 100_000
        self._count = 0
        if self._n_episode <= 0:
            raise ValueError(f"env.n_evaluator_episode must be positive, got {self._n_episode}")

    def should_evaluate(self, ctx: Any) -> bool:
        # not before the first update: an untrained policy that happens to reach the stop value (a greedy
        # random network balances CartPole for some seeds) would end a run that learned nothing
        if ctx.last_eval_iter < 0:
            return ctx.train_iter > 0
        return ctx.train_iter - ctx.last_eval_iter >= self._eval_freq

    def __call__(self, ctx: Any) -> None:
        if not self.should_evaluate(ctx):
            return
        start = time.perf_counter()
        result = evaluate_episodes(self._policy, self._env, self._n_episode,
                                   self._seed + self._count * self._env.num_envs)
        self._count += 1
        returns = np.asarray(result["returns"])
        value = float(returns.mean())
        ctx.eval_value = ctx.last_eval_value = value
        ctx.last_eval_iter = ctx.train_iter
        ctx.eval_output = {"returns": result["returns"], "lengths": result["lengths"], "mean": value,
                           "std": float(returns.std()), "train_iter": ctx.train_iter, "env_step": ctx.env_step,
                           "duration": time.perf_counter() - start}
        if value >= self._stop_value:
            ctx.finish = True
            ctx.stop_reason = "stop_value"


def interaction_evaluator(cfg: Mapping[str, Any], policy: Any, env: Any) -> InteractionEvaluator:
    """DI-engine's name for ``InteractionEvaluator(cfg, policy.eval_mode, env)``."""
    return InteractionEvaluator(cfg, policy, env)
