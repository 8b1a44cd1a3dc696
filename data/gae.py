"""Generalized advantage estimation (Schulman et al., 2016), per env stream.

For each env column of a time-major ``[T, E]`` chunk::

    delta_t = r_t + gamma * V(next_obs_t) * (1 - terminated_t) - V(obs_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}        done = terminated or truncated
    returns = A_t + V(obs_t)

``next_obs_t`` is the real next observation (the final one where an episode ended), so a truncated step
bootstraps from the value of its real final observation and a terminated one from zero; the recursion
never crosses an episode end or another env's data. The last step of a chunk bootstraps from
``V(next_obs)`` too, so chunks need no overlap.
"""
from __future__ import annotations

from typing import Tuple

import torch

__all__ = ["gae_advantages", "agent_flags"]


def gae_advantages(reward: torch.Tensor, value: torch.Tensor, next_value: torch.Tensor, terminated: torch.Tensor,
                   truncated: torch.Tensor, gamma: float, lam: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets, all tensors ``[T, E]``; with several agents per env row, ``reward``,
    ``value`` and ``next_value`` ``[T, E, N]`` (each agent's stream) and the row's flags ``[T, E]``.

    Examples:
        >>> r = torch.tensor([[1.0], [1.0]]); v = torch.tensor([[0.5], [0.5]]); nv = torch.tensor([[0.5], [2.0]])
        >>> f = torch.tensor([[False], [False]])
        >>> adv, ret = gae_advantages(r, v, nv, f, f, gamma=1.0, lam=1.0)
        >>> adv.squeeze(1).tolist()   # [1 + 1 + 2 - 0.5, 1 + 2 - 0.5]
        [3.5, 2.5]
    """
    reward, value, next_value = reward.float(), value.float(), next_value.float()
    if terminated.dim() < reward.dim():  # an env row's flags over its agents (data.parallel_envs: [T, E] vs [T, E, N])
        shape = terminated.shape + (1,) * (reward.dim() - terminated.dim())
        terminated, truncated = terminated.reshape(shape), truncated.reshape(shape)
    not_terminated = (~terminated.bool()).float()
    not_done = (~(terminated.bool() | truncated.bool())).float()
    delta = reward + gamma * next_value * not_terminated - value
    adv = torch.zeros_like(delta)
    running = torch.zeros_like(delta[0])
    for t in range(len(delta) - 1, -1, -1):
        running = delta[t] + gamma * lam * not_done[t] * running
        adv[t] = running
    return adv, adv + value


def agent_flags(terminated: torch.Tensor, truncated: torch.Tensor, alive: torch.Tensor,
                next_alive: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Each agent's own episode flags ``[T, E, N]`` from its row's ``[T, E]`` and the agents' ``alive`` before and
    after each step (``data.parallel_envs``): an agent that leaves while its row plays on ends its own stream
    there, as terminated (it bootstraps from zero: PettingZoo envs end an agent early when it dies; a time limit
    truncates every agent together, which ends the row), and the steps after it, where it no longer acts, are
    ends too, so that nothing of them reaches its advantages.

    Examples:
        >>> f = torch.zeros(2, 1, dtype=torch.bool)
        >>> alive = torch.tensor([[[1, 1]], [[1, 0]]]); after = torch.tensor([[[1, 0]], [[1, 0]]])
        >>> term, trunc = agent_flags(f, f, alive, after)
        >>> term[:, 0].tolist()   # agent 1 left in step 0 and was gone in step 1
        [[False, True], [False, True]]
    """
    row_term, row_trunc = terminated.bool().unsqueeze(-1), truncated.bool().unsqueeze(-1)
    left = ~next_alive.bool() & ~(row_term | row_trunc)
    return row_term | left, row_trunc.expand_as(left)
