"""The GAE middleware: advantages and returns for what an on-policy collector just gathered
(the computation itself is ``data.gae.gae_advantages``).

A recurrent policy's values depend on its memory: the collector stored the memory after each step
(``next_state``, before the reset at an episode end), and ``V(next_obs)`` is taken from it, so a truncated
episode bootstraps from its real final observation with the memory that saw the episode. Its rollout is then
cut into sequences (``data.sequences``) instead of flattened into transitions."""
from __future__ import annotations

from typing import Callable, Optional

import torch

from data.batch import make_batch
from data.gae import agent_flags, gae_advantages
from data.parallel_envs import ALIVE_KEY
from data.sequences import to_sequences
from engine.context import OnlineRLContext
from engine.protocols import ValuePolicy, require

__all__ = ["gae_estimator"]


def gae_estimator(policy: ValuePolicy, *, gamma: float, lam: float,
                  seq_len: Optional[int] = None,
                  reward_scale: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
                  observe_returns: Optional[Callable[[torch.Tensor], None]] = None
                  ) -> Callable[[OnlineRLContext], None]:
    """Middleware: add ``adv`` and ``returns`` to the time-major ``[T, E]`` ``ctx.trajectories`` of an
    on-policy collector, in place, then flatten the batch to ``[T * E]`` transitions for minibatching, or
    (``seq_len``) cut it into ``[E * T / seq_len, seq_len]`` sequences for a recurrent policy.

    Args:
        policy: ``policy.collect_mode``; its ``value(obs)`` gives the bootstrap values (a recurrent policy's
            ``value(obs, state=next_state)``, when the rollout holds ``next_state``).
        gamma: discount factor (``policy.discount_factor``).
        lam: GAE lambda (``policy.collect.gae_lambda``).
        seq_len: cut the rollout into sequences of this many steps (``policy.learn.seq_len`` of ``ppo_lstm``).
        reward_scale: ``(reward [T, E], done [T, E]) -> scaled reward``, used for the advantages and returns in
            place of the rewards (PPO's ``policy.reward_norm``: ``policy.scale_rewards``); ``traj.reward`` stays
            the env's.
        observe_returns: called with each rollout's value targets (PPO's ``policy.value_norm``:
            ``policy.observe_returns``).
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
        rows = lambda x: x.flatten(0, 1)  # noqa: E731 - [T, E, ...] -> [T * E, ...], every leaf of a tree obs
        memory = {"state": rows(traj.next_state)} if "next_state" in traj else {}
        next_value = policy.value(rows(traj.next_obs), **memory)
        reward = traj.reward if reward_scale is None else reward_scale(traj.reward, traj.terminated | traj.truncated)
        terminated, truncated, acted = traj.terminated, traj.truncated, None
        alive = _alive(traj.obs)
        if alive is not None:  # several agents per row: each one's stream ends where it leaves
            terminated, truncated = agent_flags(terminated, truncated, alive, _alive(traj.next_obs))
            acted = alive.bool()
        traj.adv, traj.returns = gae_advantages(reward, traj.value, next_value.reshape(traj.value.shape),
                                                terminated, truncated, gamma, lam)
        if observe_returns is not None:  # the value targets of the agents that acted (all, with one per row)
            observe_returns(traj.returns if acted is None else traj.returns[acted])
        if seq_len is None:
            ctx.trajectories = traj.flatten(0, 1)
        else:
            ctx.trajectories = make_batch(to_sequences({key: traj[key] for key in traj.keys()}, seq_len))

    return _gae_estimator


def _alive(obs: object) -> Optional[torch.Tensor]:
    """The agents' ``alive`` ``[T, E, N]`` of a multi-agent rollout's observations (``data.parallel_envs``); None
    for one agent per env."""
    keys = getattr(obs, "keys", None)
    return obs[ALIVE_KEY] if keys is not None and ALIVE_KEY in keys() else None
