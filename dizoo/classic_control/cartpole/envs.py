"""Env types ``cartpole``: gymnasium's CartPole-v1 (episodes of at most 500 steps); ``cartpole_torch``: the
same dynamics as batched torch tensors on a device (``CartPole-torch``, ``torch_env.py``; docs/performance.md),
evaluated on gymnasium's CartPole-v1 itself; and ``cartpole_masked``: CartPole with the velocities hidden, a
partially observed task.

``cartpole_masked`` keeps the cart's position and the pole's angle of CartPole's ``[x, x_dot, theta,
theta_dot]`` and drops both velocities, so one observation no longer tells where the pole is going: a policy
must infer the velocities from successive observations (a memory: a recurrent policy, or stacked frames). A
feed-forward policy sees only a snapshot (the field's standard test of recurrent PPO: SB3-contrib's
``CartPoleNoVel``, CleanRL's masked CartPole).

Stop value 475: gymnasium's ``reward_threshold`` for CartPole-v1 (195 was CartPole-v0's, with its 200-step
episodes); a return is at most 500, one reward a step for 500 steps. All three types stop there.
"""
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

from data.envs import GymEnvType
from data.torch_env import TorchEnvType
from engine.registry import ENV_REGISTRY

from .torch_env import CartPoleTorch

__all__ = ["CARTPOLE", "CARTPOLE_TORCH", "CARTPOLE_MASKED", "VelocityMasked", "MaskedCartPoleType"]

#: gymnasium's ``reward_threshold`` of CartPole-v1 (the module docstring)
SOLVED = 475.0

CARTPOLE = ENV_REGISTRY.register("cartpole", GymEnvType("CartPole-v1", stop_value=SOLVED, best_step_reward=1.0))
CARTPOLE_TORCH = ENV_REGISTRY.register("cartpole_torch", TorchEnvType("CartPole-torch", CartPoleTorch, stop_value=SOLVED,
                                                                      gym_twin="CartPole-v1", best_step_reward=1.0))


class VelocityMasked(gym.ObservationWrapper):
    """CartPole's observation without the velocities: ``[x, theta]`` (indices 0 and 2).

    Examples:
        >>> env = VelocityMasked(gym.make("CartPole-v1"))
        >>> env.observation_space.shape
        (2,)
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape
        (2,)
    """

    KEPT = (0, 2)

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or space.shape != (4,):
            raise ValueError(f"VelocityMasked wraps CartPole's 4-dimensional Box observation, got {space}")
        kept = list(self.KEPT)
        self.observation_space = gym.spaces.Box(space.low[kept], space.high[kept], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[list(self.KEPT)]


class MaskedCartPoleType(GymEnvType):
    """Env type ``cartpole_masked``: CartPole-v1 wrapped in ``VelocityMasked`` (stop value 475, as CartPole).
    ``--env CartPole-v1`` keeps choosing ``cartpole`` (``by_id``); configs name this type."""

    by_id = False

    def __init__(self) -> None:
        super().__init__("CartPole-v1", stop_value=SOLVED, best_step_reward=1.0)

    def make(self, env_cfg: Mapping[str, Any]) -> gym.Env:
        return VelocityMasked(super().make(env_cfg))


CARTPOLE_MASKED = ENV_REGISTRY.register("cartpole_masked", MaskedCartPoleType())
