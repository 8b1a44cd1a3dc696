"""DQN on Pong (Nature-DQN torso): ``python dizoo/atari/config/serial/pong/pong_dqn_8env_config.py``.

DI-engine's settings with 8 envs, as the field's documents (and the DDP configs, per rank) use them; the
config tuned for wall-clock time on one GPU is ``pong_dqn_config.py``.

Needs the atari extra: ``pip install -c constraints.txt -e ".[atari]"``. Meant for a GPU (``cuda=True``;
on a machine without CUDA it runs on the CPU, slowly, with a warning).
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pong_dqn_8env",
    policy=dict(
        cuda=True,
        model=dict(encoder_hidden_size_list=[512]),
        nstep=3,
        learn=dict(
            update_per_collect=10,
            batch_size=32,
            learning_rate=0.0001,
            target_update_freq=500,
        ),
        eval=dict(evaluator=dict(eval_freq=4000)),
        other=dict(eps=dict(start=1.0, decay=250000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="atari"),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
