"""The partially observed CartPole (env type ``cartpole_masked``): the velocities are gone, the rest is CartPole."""
from __future__ import annotations

import doctest

import gymnasium as gym
import numpy as np
import pytest

from data.envs import make_vector_env
from engine.registry import ENV_REGISTRY


def test_masked_cartpole_keeps_position_and_angle_only():
    import dizoo.classic_control.cartpole.envs as envs

    env_type = ENV_REGISTRY.get("cartpole_masked")
    env = env_type.make(env_type.default_config())
    full = gym.make("CartPole-v1")
    try:
        masked_obs, _ = env.reset(seed=3)
        full_obs, _ = full.reset(seed=3)
        assert env.observation_space.shape == (2,) and np.array_equal(masked_obs, full_obs[[0, 2]])
        for action in (0, 1, 1, 0):  # the same dynamics underneath
            masked_obs, reward, *_ = env.step(action)
            full_obs, full_reward, *_ = full.step(action)
            assert np.array_equal(masked_obs, full_obs[[0, 2]]) and reward == full_reward
    finally:
        env.close()
        full.close()
    assert doctest.testmod(envs).failed == 0
    with pytest.raises(ValueError, match="4-dimensional Box"):
        envs.VelocityMasked(gym.make("Pendulum-v1"))


def test_masked_cartpole_vector_env_and_stop_value():
    env_type = ENV_REGISTRY.get("cartpole_masked")
    venv = make_vector_env(env_type, env_type.default_config(), 3, seed=0)
    try:
        assert venv.single_observation_space.shape == (2,)
    finally:
        venv.close()
    assert env_type.default_config()["stop_value"] == 475


def test_env_id_still_chooses_plain_cartpole():
    from commands.algo_env import build_config

    assert build_config("ppo", "CartPole-v1")[1]["env"]["type"] == "cartpole"
