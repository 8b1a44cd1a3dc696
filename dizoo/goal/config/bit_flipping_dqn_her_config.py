"""DQN with hindsight experience replay on 15-bit flipping: ``python dizoo/goal/config/bit_flipping_dqn_her_config.py``.

The HER paper's first task (``dizoo/goal/envs.py``): without relabelling DQN never meets a goal of 15 bits, with
``her.strategy='future'`` and ``k=4`` (the paper's and SB3's defaults: 80% of a batch relabelled) it does.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="bit_flipping_dqn_her",
    env=dict(collector_env_num=8, evaluator_env_num=8, n_evaluator_episode=32),
    policy=dict(
        nstep=1,  # a relabelled goal changes every reward of a window: hindsight replay takes one-step returns
        learn=dict(update_per_collect=8, batch_size=128, learning_rate=0.001, target_update_freq=200),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=200)),
        other=dict(
            eps=dict(type="linear", start=1.0, end=0.05, decay=10_000),
            replay_buffer=dict(replay_buffer_size=100_000, her=dict(strategy="future", k=4)),
        ),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="bit_flipping"),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
