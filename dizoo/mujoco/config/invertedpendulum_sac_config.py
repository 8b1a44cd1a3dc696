"""SAC on InvertedPendulum-v5: ``python dizoo/mujoco/config/invertedpendulum_sac_config.py [--seed N]``.

Needs the mujoco extra: ``pip install "baton-rl[mujoco]"``. The smallest MuJoCo task (4 observations, one action in
[-3, 3]; an episode ends when the pole falls, or after 1,000 steps) and the suite's MuJoCo learning test
(tests/dizoo/test_mujoco_learning.py). The settings of hopper_sac_config.py (CleanRL's) but the warm-up: 1,000
uniformly random env steps instead of 5,000 (a random policy keeps the pole up for a few steps only, so 5,000 would
be half of what it needs), and evaluations every 1,000 updates (both the policy's defaults). It stops at the env's
threshold: a mean greedy return of 950 over 5 episodes.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="invertedpendulum_sac",
    env=dict(),  # the mujoco family's defaults: 1 collecting env, 5 evaluation episodes
    policy=dict(  # hopper_sac_config.py's learning rates and temperature; the warm-up and evaluations: the defaults
        learn=dict(learning_rate_policy=3e-4, learning_rate_alpha=1e-3, alpha=1.0),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="invertedpendulum"),
    policy=dict(type="sac"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
