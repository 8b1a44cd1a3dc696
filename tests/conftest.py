"""Shared fixtures: a tiny deterministic env whose observations count steps, and a quick DQN config."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from easydict import EasyDict

from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY


class CountingEnv(gym.Env):
    """obs = [step index within the episode, episode id]; reward = 1 per step; terminates at step
    ``terminate_at`` (None: never). Truncation comes from gymnasium's TimeLimit (max_episode_steps)."""

    def __init__(self, terminate_at=None):
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at = terminate_at
        self._t = 0
        self._episode = -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._episode += 1
        return np.array([self._t, self._episode], np.float32), {}

    def step(self, action):
        self._t += 1
        terminated = self.terminate_at is not None and self._t >= self.terminate_at
        return np.array([self._t, self._episode], np.float32), 1.0, terminated, False, {}


if "BatonCounting-v0" not in gym.registry:
    gym.register("BatonCounting-v0", entry_point=CountingEnv)
ENV_REGISTRY.register("counting", GymEnvType("BatonCounting-v0", stop_value=1e9, max_episode_steps=5))


@pytest.fixture
def quick_cartpole_config(tmp_path):
    """The dizoo CartPole DQN config, shrunk for fast tests, writing under tmp_path."""
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

    main = copy.deepcopy(main_config)
    main.exp_name = str(tmp_path / "exp")
    main.log = EasyDict(dict(progress=False))
    main.env.collector_env_num = 4
    main.env.evaluator_env_num = 2
    main.env.n_evaluator_episode = 2
    main.policy.collect.n_sample = 32
    main.policy.learn.update_per_collect = 2
    main.policy.eval.evaluator.eval_freq = 20
    return main, copy.deepcopy(create_config)
