"""Goal-conditioned tasks for hindsight experience replay (``data.replay.her``): env type ``bit_flipping``, the
gymnasium id ``BitFlipping-v0``.

Bit flipping is the task the HER paper (Andrychowicz et al., 2017, section 4.1) introduced to show what
hindsight does: a state of ``n`` bits, a goal of ``n`` bits, an action flips one bit, and the reward is -1 at
every step the state is not the goal, 0 when it is. A random policy almost never meets a goal of 15 bits, so
DQN without relabelling sees only -1 and learns nothing (the paper: no success beyond 13 bits), while with HER
every episode teaches the goals it did reach. It is written here, not taken from a library: SB3 ships one for
its tests only (``stable_baselines3.common.envs``), and gymnasium-robotics has none.

The observation follows gymnasium-robotics' ``GoalEnv`` convention: a dict of ``observation`` (the bits),
``achieved_goal`` (the same bits) and ``desired_goal``, all float32 0/1 vectors; ``compute_reward`` and
``compute_terminated`` work on batches of goals. An episode ends when the state meets the goal (terminated) or
after ``n`` steps (truncated). ``continuous=True`` takes a Box action of ``n`` values and flips each bit whose
value is positive (SB3's continuous variant), for SAC and TD3.

Stop value -7.5 (for 15 bits): a return is ``-(steps - 1)`` when the goal is met and ``-n`` when it is not; an
optimal policy needs as many steps as bits differ (7.5 on average), so a mean of -7.5 means about 88% of
episodes meet their goal. Another size: ``env.env_kwargs.n_bits`` with ``env.max_episode_steps`` (the registered
limit is 15 steps) and ``env.stop_value``.
"""
from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np

from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY

__all__ = ["BitFlippingEnv", "BIT_FLIPPING"]

ENV_ID = "BitFlipping-v0"


class BitFlippingEnv(gym.Env):
    """``n_bits`` bits to turn into a goal, one flip a step (the module docstring).

    Examples:
        >>> env = BitFlippingEnv(n_bits=4)
        >>> obs, _ = env.reset(seed=0)
        >>> sorted(obs), obs["observation"].shape
        (['achieved_goal', 'desired_goal', 'observation'], (4,))
        >>> float(env.compute_reward(obs["desired_goal"], obs["desired_goal"], {}))
        0.0
    """

    metadata = {"render_modes": []}

    def __init__(self, n_bits: int = 15, continuous: bool = False) -> None:
        if n_bits < 1:
            raise ValueError(f"n_bits must be >= 1, got {n_bits}")
        self.n_bits, self.continuous = int(n_bits), bool(continuous)
        bits = gym.spaces.Box(0.0, 1.0, (self.n_bits,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": bits, "achieved_goal": bits, "desired_goal": bits})
        self.action_space = (gym.spaces.Box(-1.0, 1.0, (self.n_bits,), np.float32) if continuous
                             else gym.spaces.Discrete(self.n_bits))
        self._state = np.zeros(self.n_bits, np.float32)
        self._goal = np.zeros(self.n_bits, np.float32)

    def _obs(self) -> dict:
        return {"observation": self._state.copy(), "achieved_goal": self._state.copy(), "desired_goal": self._goal.copy()}

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._goal = self._state.copy()
        while np.array_equal(self._goal, self._state):  # a goal already met teaches nothing
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        return self._obs(), {}

    def step(self, action: Any):
        if self.continuous:
            flip = np.asarray(action).reshape(self.n_bits) > 0
        else:
            flip = np.zeros(self.n_bits, bool)
            flip[int(action)] = True
        self._state = np.where(flip, 1.0 - self._state, self._state).astype(np.float32)
        obs = self._obs()
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], {}))
        terminated = bool(self.compute_terminated(obs["achieved_goal"], obs["desired_goal"], {}))
        return obs, reward, terminated, False, {"is_success": terminated}

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any) -> np.ndarray:
        """-1 where the goal is not met, 0 where it is, for one goal or a batch (``[B, n]``)."""
        missed = (np.asarray(achieved_goal) != np.asarray(desired_goal)).any(axis=-1)
        return np.where(missed, -1.0, 0.0).astype(np.float32)

    def compute_terminated(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any) -> np.ndarray:
        """Whether the goal is met (the episode ends there), for one goal or a batch."""
        return (np.asarray(achieved_goal) == np.asarray(desired_goal)).all(axis=-1)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=BitFlippingEnv, max_episode_steps=15)

BIT_FLIPPING = ENV_REGISTRY.register("bit_flipping", GymEnvType(ENV_ID, stop_value=-7.5, best_step_reward=0.0,
                                                                best_return=0.0))
