"""CartPole as batched torch dynamics: env type ``cartpole_torch`` (env id ``CartPole-torch``).

The physics, termination and truncation of gymnasium's CartPole-v1 (``gymnasium/envs/classic_control/
cartpole.py``, Euler integration, 500-step episodes, reward 1 on every step including the last), computed for
all envs at once on one device (``data.torch_env``). tests/dizoo/test_torch_envs.py checks it against
gymnasium's CartPole-v1 step for step from the same states. Unlike gymnasium's env, an invalid action is not
refused (that would read the actions back to the host): any action other than 1 pushes left.
"""
from __future__ import annotations

import math
from typing import Tuple

import gymnasium as gym
import numpy as np
import torch

from data.torch_env import TorchVectorEnv

__all__ = ["CartPoleTorch"]

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASS_POLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds between state updates
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4


class CartPoleTorch(TorchVectorEnv):
    """``num_envs`` CartPole-v1 envs; state ``[x, x_dot, theta, theta_dot]`` per row, observed as it is."""

    max_episode_steps = 500
    single_action_space = gym.spaces.Discrete(2)
    _high = np.array([X_THRESHOLD * 2, np.finfo(np.float32).max, THETA_THRESHOLD * 2, np.finfo(np.float32).max],
                     dtype=np.float32)
    single_observation_space = gym.spaces.Box(-_high, _high, dtype=np.float32)

    def _initial_state(self, n: int) -> torch.Tensor:
        return self._uniform(n, (0.05, 0.05, 0.05, 0.05))

    def _dynamics(self, state: torch.Tensor, action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # gymnasium's formulas in its order of operations; few ops, as each costs microseconds at any batch size
        theta, theta_dot = state[2], state[3]
        force = (action.reshape(-1) == 1).to(state.dtype).mul_(2 * FORCE_MAG).sub_(FORCE_MAG)  # +-10 exactly
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (POLEMASS_LENGTH * theta_dot.square()).mul_(sintheta).add_(force).div_(TOTAL_MASS)
        thetaacc = (GRAVITY * sintheta).sub_(costheta * temp).div_(
            (MASS_POLE * costheta.square()).div_(TOTAL_MASS).neg_().add_(4.0 / 3.0).mul_(LENGTH))
        xacc = torch.sub(temp, (POLEMASS_LENGTH * thetaacc).mul_(costheta).div_(TOTAL_MASS))
        # Euler, as CartPole-v1's default kinematics_integrator: state + tau * d(state)/dt
        next_state = torch.stack((state[1], xacc, theta_dot, thetaacc)).mul_(TAU).add_(state)
        # |x| > 2.4 or |theta| > 12 degrees: gymnasium's four comparisons
        terminated = (next_state[0].abs() > X_THRESHOLD) | (next_state[2].abs() > THETA_THRESHOLD)
        return next_state, torch.ones(state.shape[1], dtype=torch.float32, device=state.device), terminated

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.T.to(torch.float32, memory_format=torch.contiguous_format)
