"""PPO on HalfCheetah-v5: ``python dizoo/mujoco/config/halfcheetah_ppo_config.py [--seed N] [--max-env-step N]``.

Needs the mujoco extra: ``pip install "baton-rl[mujoco]"``. The settings of hopper_ppo_config.py, which are
CleanRL's ``ppo_continuous_action.py`` for every MuJoCo task (named there, with where they depart), observation
normalisation and reward scaling included. HalfCheetah never terminates: every episode runs its 1,000 steps
and ends truncated, bootstrapping from its last observation.
"""
import copy

from dizoo.mujoco.config import hopper_ppo_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "halfcheetah_ppo"
create_config = copy.deepcopy(base.create_config)
create_config.env.type = "halfcheetah"

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
