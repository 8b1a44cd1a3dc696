"""Env type ``pendulum``: gymnasium's Pendulum-v1 (continuous torque in [-2, 2], 200-step episodes)."""
from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY

PENDULUM = ENV_REGISTRY.register("pendulum", GymEnvType("Pendulum-v1", stop_value=-250))
