"""TD3 on InvertedPendulum-v5: ``python dizoo/mujoco/config/invertedpendulum_td3_config.py [--seed N]``.

Needs the mujoco extra: ``pip install "baton-rl[mujoco]"``. The suite's MuJoCo learning test for TD3
(tests/dizoo/test_mujoco_learning.py). The settings of CleanRL's ``td3_continuous_action.py`` (the policy's
defaults; halfcheetah_td3_config.py names them) but the warm-up: 1,000 uniformly random env steps instead of
25,000 (a random policy keeps the pole up for a few steps only), and evaluations every 1,000 updates (both the
policy's defaults). It stops at the env's threshold: a mean greedy return of 950 over 5 episodes.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="invertedpendulum_td3",
    env=dict(),  # the mujoco family's defaults: 1 collecting env, 5 evaluation episodes
    policy=dict(),  # the TD3 policy's defaults: CleanRL's settings, but a warm-up of 1,000 and evaluations every 1,000
))
create_config = EasyDict(dict(
    env=dict(type="invertedpendulum"),
    policy=dict(type="td3"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
