"""PPO on MiniGrid-DoorKey-5x5-v0: ``python dizoo/minigrid/config/doorkey_ppo_config.py`` (the minigrid extra).

The agent sees its 7x7 view (a uint8 image: the small convolution stack) and its direction (an embedding), the
mission dropped (``dizoo/minigrid/envs.py``). rl-baselines3-zoo's DoorKey-5x5 settings (``ppo.yml``: 8 envs of
128 steps, 10 epochs, learning rate 2.5e-4, clip 0.2, no entropy bonus, GAE 0.95) with minibatches of 256.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="doorkey_ppo",
    env=dict(collector_env_num=8, evaluator_env_num=8, n_evaluator_episode=16),
    policy=dict(
        learn=dict(epoch_per_collect=10, batch_size=256, learning_rate=2.5e-4, entropy_weight=0.0),
        collect=dict(n_sample=1024, gae_lambda=0.95),
        eval=dict(evaluator=dict(eval_freq=200)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="minigrid"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
