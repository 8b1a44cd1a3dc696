"""TD3 on HalfCheetah-v5: ``python dizoo/mujoco/config/halfcheetah_td3_config.py [--seed N] [--max-env-step N]``.

Needs the mujoco extra: ``pip install "baton-rl[mujoco]"``. The settings of hopper_td3_config.py, which are
CleanRL's for every MuJoCo task (named there). HalfCheetah never terminates: every episode runs its 1,000 steps
and ends truncated, bootstrapping from its last observation.
"""
import copy

from dizoo.mujoco.config import hopper_td3_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "halfcheetah_td3"
create_config = copy.deepcopy(base.create_config)
create_config.env.type = "halfcheetah"

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
