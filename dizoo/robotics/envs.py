"""gymnasium-robotics' goal-conditioned arm (the ``robotics`` extra): env type ``fetch_reach``, ``FetchReach-v4``.

The Fetch tasks (Plappert et al., 2018, "Multi-Goal Reinforcement Learning") observe a dict of ``observation``
(the gripper's position and velocity, 10 values), ``achieved_goal`` (where the gripper is) and ``desired_goal``
(where it should be), give -1 a step until the gripper is within 5 cm of the goal (``reward_type='sparse'``) and
end after 50 steps; ``compute_reward`` recomputes a reward for any goal, which hindsight replay
(``data.replay.her``) relabels through. FetchReach is the family's first task: SAC with HER meets its goals
within about 10k env steps (rl-baselines3-zoo trains it for 20k).

Stop value -5: the mean return of episodes that reach the goal within about 5 steps and stay there; gymnasium-robotics
gives no ``reward_threshold``. A random policy scores about -45.

Importing this module registers gymnasium-robotics' ids when the extra is installed (its import registers them),
so ``--env FetchReach-v4`` resolves to this family. gymnasium-robotics 1.4.2 needs mujoco < 3.4: later mujoco
versions compare joint types differently and its Fetch envs fail at construction (an AssertionError in
``set_joint_qpos``); setup.py's ``robotics`` extra pins it.
"""
from __future__ import annotations

import contextlib
import io

import gymnasium as gym

from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY

__all__ = ["FETCH_REACH"]

try:  # its import registers the Fetch ids with gymnasium; its Farama notice (about the Adroit hand tasks' v1
    # rewards, not the Fetch tasks) would print in every process that loads baton's env types: kept quiet
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import gymnasium_robotics  # noqa: F401
except (ImportError, gym.error.DependencyNotInstalled):  # the extra, or MuJoCo under it, is not installed (the
    pass  # latter raises gymnasium's own error): making the env names it (GymEnvType.check_requires)

FETCH_REACH = ENV_REGISTRY.register("fetch_reach", GymEnvType("FetchReach-v4", stop_value=-5.0,
                                                              requires=[("gymnasium_robotics", "robotics")],
                                                              best_step_reward=0.0))
