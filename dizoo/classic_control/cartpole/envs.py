"""Env types ``cartpole``: gymnasium's CartPole-v1 (episodes of at most 500 steps); and ``cartpole_torch``: the
same dynamics as batched torch tensors on a device (``CartPole-torch``, ``torch_env.py``; docs/performance.md),
evaluated on gymnasium's CartPole-v1 itself.
"""
from data.envs import GymEnvType
from data.torch_env import TorchEnvType
from engine.registry import ENV_REGISTRY

from .torch_env import CartPoleTorch

CARTPOLE = ENV_REGISTRY.register("cartpole", GymEnvType("CartPole-v1", stop_value=195))
CARTPOLE_TORCH = ENV_REGISTRY.register("cartpole_torch", TorchEnvType("CartPole-torch", CartPoleTorch, stop_value=195,
                                                                      gym_twin="CartPole-v1"))
