"""PPO on MiniGrid-DoorKey-5x5-v0: ``python dizoo/minigrid/config/doorkey_ppo_config.py`` (the minigrid extra).

The agent sees its 7x7 view (a uint8 image: the small convolution stack) and its direction (an embedding), the
mission dropped (``dizoo/minigrid/envs.py``). The settings of MiniGrid's own reference trainer (lcswillems'
rl-starter-files, which rl-baselines3-zoo follows: 16 envs of 128 steps, 4 epochs of minibatches of 256, entropy
bonus 0.01, GAE 0.95) with its learning rate lowered to 2.5e-4 (rl-baselines3-zoo's), and the image fed as the
grid's indices, not scaled as pixels.

What mattered, measured on seed 0 (BENCHMARKS.md, "MiniGrid"): the image's values are object, colour and state
indices of at most 10, which the default scaling of a uint8 key (1/255) shrank to nothing (``normalise=False``
keeps them); without an entropy bonus no episode met the goal in 100k env steps (a random policy meets it in about
one episode of ten, and the policy's entropy fell before it could learn from them); at a learning rate of 1e-3
the policy collapsed after solving MiniGrid-Empty-5x5. As shipped: training episodes near 0.95 from about 150k env
steps; the greedy evaluation (the mean of 16 episodes) first at 0.9 after 288k and 0.96 at 400k, about 3 minutes on
the 2-core machine. A greedy policy can loop where the sampled one does not, so it lags the training episodes.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="doorkey_ppo",
    env=dict(collector_env_num=16, evaluator_env_num=8, n_evaluator_episode=16),
    policy=dict(
        model=dict(encoders=dict(image=dict(normalise=False))),
        learn=dict(epoch_per_collect=4, batch_size=256, learning_rate=2.5e-4, entropy_weight=0.01),
        # collect: the defaults, 2,048 steps (16 envs x 128) and GAE 0.95
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
