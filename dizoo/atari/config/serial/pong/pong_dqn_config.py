"""DQN on Pong (Nature-DQN torso): ``python dizoo/atari/config/serial/pong/pong_dqn_config.py``.

Needs the atari extra: ``pip install -c constraints.txt -e ".[atari]"``. Meant for a GPU (``cuda=True``;
on a machine without CUDA it runs on the CPU, slowly, with a warning).
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pong_dqn_seed0",
    env=dict(
        collector_env_num=8,
        evaluator_env_num=8,
        n_evaluator_episode=8,
        stop_value=20,
        env_id="PongNoFrameskip-v4",
        frame_stack=4,
    ),
    policy=dict(
        cuda=True,
        priority=False,
        model=dict(
            obs_shape=[4, 84, 84],
            action_shape=6,
            encoder_hidden_size_list=[512],
            dueling=True,
        ),
        nstep=3,
        discount_factor=0.99,
        learn=dict(
            update_per_collect=10,
            batch_size=32,
            learning_rate=0.0001,
            target_update_freq=500,
        ),
        collect=dict(n_sample=96),
        eval=dict(evaluator=dict(eval_freq=4000)),
        other=dict(
            eps=dict(type="exp", start=1.0, end=0.05, decay=250000),
            replay_buffer=dict(replay_buffer_size=100000),
        ),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="atari"),
    env_manager=dict(type="sync"),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
