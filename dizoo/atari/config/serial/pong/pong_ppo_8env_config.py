"""PPO on Pong (shared Nature-CNN actor-critic): ``python dizoo/atari/config/serial/pong/pong_ppo_8env_config.py``.

DI-engine's settings with 8 envs, as the field's documents (and the DDP configs, per rank) use them; the
config tuned for wall-clock time on one GPU is ``pong_ppo_config.py``.

Needs the atari extra: ``pip install -c constraints.txt -e ".[atari]"``. Meant for a GPU.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pong_ppo_8env",
    policy=dict(
        cuda=True,
        model=dict(
            actor_head_hidden_size_list=[512],
            critic_head_hidden_size_list=[512],
        ),
        learn=dict(
            epoch_per_collect=4,
            batch_size=256,
            learning_rate=0.00025,
            clip_ratio=0.1,
            entropy_weight=0.01,
            value_clip=True,
        ),
        collect=dict(n_sample=1024),
        eval=dict(evaluator=dict(eval_freq=200)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="atari"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
