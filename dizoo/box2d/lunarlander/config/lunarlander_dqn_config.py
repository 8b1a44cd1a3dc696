"""DQN on LunarLander-v3 (discrete): ``python dizoo/box2d/lunarlander/config/lunarlander_dqn_config.py``.

Needs the box2d extra: ``pip install -c constraints.txt -e ".[box2d]"``.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="lunarlander_dqn_seed0",
    env=dict(
        collector_env_num=8,
        evaluator_env_num=8,
        n_evaluator_episode=8,
        stop_value=200,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=8,
            action_shape=4,
            encoder_hidden_size_list=[512, 64],
            dueling=True,
        ),
        nstep=3,
        discount_factor=0.99,
        learn=dict(
            update_per_collect=10,
            batch_size=64,
            learning_rate=0.001,
            target_update_freq=100,
        ),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=1000)),
        other=dict(
            eps=dict(type="exp", start=0.95, end=0.1, decay=50000),
            replay_buffer=dict(replay_buffer_size=100000),
        ),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="lunarlander"),
    env_manager=dict(type="sync"),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
