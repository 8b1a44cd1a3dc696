"""MiniGrid (the ``minigrid`` extra): env type ``minigrid``, any ``MiniGrid-*`` id, ``MiniGrid-DoorKey-5x5-v0`` by
default.

A MiniGrid agent sees a dict: ``image``, its 7x7 view of the grid as a uint8 ``[7, 7, 3]`` array (object, colour
and state indices per cell, channels last), ``direction`` (Discrete(4)) and ``mission``, a sentence. baton takes
the first two (``--env MiniGrid-...`` picks this family for every id the minigrid package registers): the image
gets the small convolution stack of ``policies.key_encoders`` (scaled by 1/255, as any uint8 key), the direction
an embedding. The mission is dropped with gymnasium's ``FilterObservation``: it is one fixed sentence in each of
the single-task envs (DoorKey: "use the key to open the door and then get to the goal"), and a ``Text`` space has
no tensor to batch; a task whose mission varies needs it encoded (minigrid's ``DictObservationSpaceWrapper``) in an
env type of its own.

Rewards: ``1 - 0.9 * steps / max_steps`` when the agent reaches the goal, 0 when the episode runs out (minigrid's
own step limit, 250 for DoorKey-5x5). Stop value 0.9, for every id: the goal reached in under a tenth of the step
limit on average (DoorKey-5x5 needs about 10 to 20 steps; rl-baselines3-zoo's trained PPO scores 0.97 there).
"""
from __future__ import annotations

import gymnasium as gym
from gymnasium.wrappers import FilterObservation

from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY

__all__ = ["MiniGridEnvType", "MINIGRID", "KEPT_KEYS"]

try:  # its import registers the MiniGrid-* ids with gymnasium
    import minigrid  # noqa: F401
except ImportError:  # the extra is not installed: making the env names it (GymEnvType.check_requires)
    pass

#: the observation keys baton keeps (the module docstring: the mission is dropped)
KEPT_KEYS = ["image", "direction"]


class MiniGridEnvType(GymEnvType):
    """Any MiniGrid id (``env.env_id``), its mission dropped."""

    #: ``--env ID`` picks this type for every gymnasium id whose entry point is in this package
    entry_point_prefix = "minigrid"

    def adapt(self, env: gym.Env) -> gym.Env:
        return FilterObservation(env, KEPT_KEYS)


MINIGRID = ENV_REGISTRY.register("minigrid", MiniGridEnvType("MiniGrid-DoorKey-5x5-v0", stop_value=0.9,
                                                             requires=[("minigrid", "minigrid")], best_return=1.0))
