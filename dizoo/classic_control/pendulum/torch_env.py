"""Pendulum as batched torch dynamics: env type ``pendulum_torch`` (env id ``Pendulum-torch``).

The dynamics, cost and truncation of gymnasium's Pendulum-v1 (``gymnasium/envs/classic_control/pendulum.py``:
g = 10, torque clipped to [-2, 2], speed to [-8, 8], 200-step episodes, never terminated), computed for all
envs at once on one device (``data.torch_env``); tests/dizoo/test_torch_envs.py checks it against
gymnasium's Pendulum-v1 step for step from the same states.
"""
from __future__ import annotations

import math
from typing import Tuple

import gymnasium as gym
import numpy as np
import torch

from data.torch_env import TorchVectorEnv

__all__ = ["PendulumTorch"]

G = 10.0
MASS = 1.0
LENGTH = 1.0
DT = 0.05
MAX_SPEED = 8.0
MAX_TORQUE = 2.0


class PendulumTorch(TorchVectorEnv):
    """``num_envs`` Pendulum-v1 envs; state ``[theta, theta_dot]`` per row, observed as
    ``[cos theta, sin theta, theta_dot]``; actions ``[N, 1]`` torques."""

    max_episode_steps = 200
    state_dim = 2  # theta, theta_dot (the observation is cos, sin, theta_dot)
    single_action_space = gym.spaces.Box(-MAX_TORQUE, MAX_TORQUE, shape=(1,), dtype=np.float32)
    _high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
    single_observation_space = gym.spaces.Box(-_high, _high, dtype=np.float32)

    def _initial_state(self, n: int) -> torch.Tensor:
        return self._uniform(n, (math.pi, 1.0))

    def _dynamics(self, state: torch.Tensor, action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        th, thdot = state[0], state[1]
        u = action.reshape(state.shape[1], -1)[:, 0].to(state.dtype).clamp(-MAX_TORQUE, MAX_TORQUE)
        costs = _angle_normalize(th) ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2
        newthdot = (thdot + (3 * G / (2 * LENGTH) * torch.sin(th) + 3.0 / (MASS * LENGTH ** 2) * u) * DT).clamp(
            -MAX_SPEED, MAX_SPEED)
        newth = th + newthdot * DT
        return torch.stack((newth, newthdot)), -costs, torch.zeros_like(th, dtype=torch.bool)

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        th, thdot = state[0], state[1]
        return torch.stack((torch.cos(th), torch.sin(th), thdot), dim=-1).to(torch.float32)


def _angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """Into [-pi, pi), as gymnasium's ``angle_normalize`` (numpy's ``%`` and torch's ``remainder`` agree on
    the sign: both follow the divisor)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi
