"""Env types ``pendulum``: gymnasium's Pendulum-v1 (continuous torque in [-2, 2], 200-step episodes); and
``pendulum_torch``: the same dynamics as batched torch tensors on a device (``Pendulum-torch``,
``torch_env.py``; docs/performance.md).

Stop value -250: gymnasium's spec of Pendulum-v1 has no ``reward_threshold``; -250 is the level Tianshou's
Pendulum tests and DI-engine's Pendulum configs take as solved (a return of 0 is the best possible: every
step's reward is at most 0).
"""
from data.envs import GymEnvType
from data.torch_env import TorchEnvType
from engine.registry import ENV_REGISTRY

from .torch_env import PendulumTorch

#: the return that counts as solved (the module docstring says whose)
SOLVED = -250.0

PENDULUM = ENV_REGISTRY.register("pendulum", GymEnvType("Pendulum-v1", stop_value=SOLVED, best_step_reward=0.0))
PENDULUM_TORCH = ENV_REGISTRY.register("pendulum_torch", TorchEnvType("Pendulum-torch", PendulumTorch, stop_value=SOLVED,
                                                                      gym_twin="Pendulum-v1", best_step_reward=0.0))
