"""Env type ``cartpole``: gymnasium's CartPole-v1 (episodes of at most 500 steps)."""
from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY

CARTPOLE = ENV_REGISTRY.register("cartpole", GymEnvType("CartPole-v1", stop_value=195))
