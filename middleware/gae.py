"""The GAE middleware: advantages and returns for what an on-policy collector just gathered
(the computation itself is ``data.gae.gae_advantages``)."""
from __future__ import annotations

from typing import Callable, Optional

import torch

from data.gae import gae_advantages
from engine.context import OnlineRLContext
from engine.protocols import ValuePolicy, require

__all__ = ["gae_estimator"]


def gae_estimator(policy: ValuePolicy, *, gamma: float, lam: float,
                  reward_scale: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None
                  ) -> Callable[[OnlineRLContext], None]:
    """Middleware: add ``adv`` and ``returns`` to the time-major ``[T, E]`` ``ctx.trajectories`` of an
    on-policy collector, in place, then flatten the batch to ``[T * E]`` transitions for minibatching.

    Args:
        policy: ``policy.collect_mode``; its ``value(obs)`` gives the bootstrap values.
        gamma: discount factor (``policy.discount_factor``).
        lam: GAE lambda (``policy.collect.gae_lambda``).
        reward_scale: ``(reward [T, E], done [T, E]) -> scaled reward``, used for the advantages and returns in
            place of the rewards (PPO's ``policy.reward_norm``: ``policy.scale_rewards``); ``traj.reward`` stays
            the env's.
    """
    require(policy, ValuePolicy, "the GAE estimator's policy")
    if policy.value is None:
        raise TypeError(f"gae_estimator needs a policy with value estimates; "
                        f"{type(getattr(policy, 'policy', policy)).__name__} has none")
    gamma, lam = float(gamma), float(lam)

    def _gae_estimator(ctx: OnlineRLContext) -> None:
        traj = ctx.trajectories
        if traj is None:
            return
        steps, envs = traj.reward.shape[:2]
        next_value = policy.value(traj.next_obs.reshape((steps * envs,) + tuple(traj.next_obs.shape[2:])))
        reward = traj.reward if reward_scale is None else reward_scale(traj.reward, traj.terminated | traj.truncated)
        traj.adv, traj.returns = gae_advantages(reward, traj.value, next_value.reshape(steps, envs),
                                                traj.terminated, traj.truncated, gamma, lam)
        ctx.trajectories = traj.flatten(0, 1)

    return _gae_estimator
