"""Env types ``pendulum``: gymnasium's Pendulum-v1 (continuous torque in [-2, 2], 200-step episodes); and
``pendulum_torch``: the same dynamics as batched torch tensors on a device (``Pendulum-torch``,
``torch_env.py``; docs/performance.md)."""
from data.envs import GymEnvType
from data.torch_env import TorchEnvType
from engine.registry import ENV_REGISTRY

from .torch_env import PendulumTorch

PENDULUM = ENV_REGISTRY.register("pendulum", GymEnvType("Pendulum-v1", stop_value=-250))
PENDULUM_TORCH = ENV_REGISTRY.register("pendulum_torch", TorchEnvType("Pendulum-torch", PendulumTorch, stop_value=-250,
                                                                      gym_twin="Pendulum-v1"))
