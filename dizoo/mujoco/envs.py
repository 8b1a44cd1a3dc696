"""Env types of gymnasium's MuJoCo v5 tasks: ``hopper``, ``halfcheetah``, ``walker2d``, ``ant``, ``humanoid``, and
``invertedpendulum`` (the smallest: 4 observations, 1 action; SAC balances it within minutes of one core, which
makes it the MuJoCo task of the suite's learning test).

Each is its gymnasium id (``Hopper-v5``, ...) as it is: 1,000-step episodes whose time limit is a truncation
(``terminated`` only when the body falls or leaves its healthy range, so a truncated step still bootstraps),
continuous actions in the task's Box (Humanoid's is [-0.4, 0.4]; the policies scale to the bounds), the raw
rewards. One change: observations are cast to float32 (MuJoCo returns float64; the networks compute in float32,
and a replay buffer of a million Humanoid transitions would hold 5.6 GB of observations in float64). MuJoCo's
own warnings (an unstable simulation; HalfCheetah's model uses an attribute MuJoCo 4 deprecates) go to this
module's logger, each text once per process, instead of a MUJOCO_LOG.TXT file in the working directory.

The stop value is the id's ``reward_threshold`` where gymnasium gives one (Hopper 3,800, HalfCheetah 4,800,
Ant 6,000, InvertedPendulum 950), else none: these tasks are trained for an env-step budget. The simulator needs the ``mujoco``
extra; without it a run stops at its first env with the command that installs it.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Dict, Mapping, Optional, Set

import gymnasium as gym
import numpy as np

from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY

__all__ = ["MujocoEnvType", "TASKS"]

logger = logging.getLogger(__name__)

#: env type -> (gymnasium id, reward_threshold or None)
TASKS: Dict[str, tuple] = {
    "hopper": ("Hopper-v5", 3800.0),
    "halfcheetah": ("HalfCheetah-v5", 4800.0),
    "walker2d": ("Walker2d-v5", None),
    "ant": ("Ant-v5", 6000.0),
    "humanoid": ("Humanoid-v5", None),
    "invertedpendulum": ("InvertedPendulum-v5", 950.0),
}


class MujocoEnvType(GymEnvType):
    """One MuJoCo task (module docstring): gymnasium's env with float32 observations."""

    def __init__(self, env_id: str, stop_value: Optional[float]) -> None:
        super().__init__(env_id, stop_value=math.inf if stop_value is None else stop_value,
                         requires=[("mujoco", "mujoco")], collector_env_num=1, evaluator_env_num=5,
                         n_evaluator_episode=5)

    def make(self, env_cfg: Mapping[str, Any]) -> gym.Env:
        self.check_requires(env_cfg["env_id"])  # mujoco is there, or the error names the extra
        _log_mujoco_warnings()  # before the model is compiled: its warnings come then
        env = super().make(env_cfg)
        space = env.observation_space
        float32 = gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)
        return gym.wrappers.TransformObservation(env, lambda obs: obs.astype(np.float32), float32)


_warned: Set[str] = set()


def _log_mujoco_warnings() -> None:
    """Route MuJoCo's warnings (process-wide) to ``logger``, each text once."""
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_warn_once)


def _warn_once(text: str) -> None:
    if text not in _warned:
        _warned.add(text)
        logger.warning("MuJoCo: %s", text)


for _name, (_env_id, _threshold) in TASKS.items():
    ENV_REGISTRY.register(_name, MujocoEnvType(_env_id, _threshold))
