"""Env type ``lunarlander``: gymnasium's LunarLander-v3 (discrete); needs the ``box2d`` extra."""
from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY

LUNARLANDER = ENV_REGISTRY.register("lunarlander", GymEnvType("LunarLander-v3", stop_value=200,
                                                               requires=[("Box2D", "box2d"), ("pygame", "box2d")]))
