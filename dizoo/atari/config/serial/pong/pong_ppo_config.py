"""PPO on Pong tuned for wall-clock time on one GPU: ``python dizoo/atari/config/serial/pong/pong_ppo_config.py``.

CleanRL's ``ppo_atari`` settings (learning rate 2.5e-4, clip 0.1, entropy 0.01, 4 epochs) on rl_games' EnvPool
layout of 64 envs x 128 steps per collect (8,192 transitions), with minibatches of 512: 64 updates per collect,
half CleanRL's ratio of updates to env steps (minibatches of 256 over 1,024 transitions). The network, losses and
gradient clip are CleanRL's (Nature CNN, orthogonal init, Adam eps 1e-5, per-minibatch advantage normalisation,
value weight 0.5, gradient norm 0.5). Measured on one H100 with 16 cores (BENCHMARKS.md, "The second GPU run"): an
evaluation return of +1.5 after 852k env steps (119 s), training episodes from -21 to -1.5 by 1.03M env steps (145
s), 7.3k env steps/s overall. Two layouts that failed there: minibatches of 2,048 at a constant 3e-4 (16 updates
per collect; still -21 after 1.05M env steps) and the same with rl_games' adaptive rate
(``lr_schedule='adaptive'``, ``kl_threshold=0.01``: the rate rose to its 1e-2 ceiling within five collects and the
network stopped learning, entropy flat at 1.75, clip fraction 0, -21 after 3.1M env steps).

The 64 envs step in two groups of 32, one stepping (ale-py's own threads) while the policy acts on the other
(``env.manager.overlap``). One evaluation every 1,600 updates (25 collects, about 200k env steps), in another
process while training goes on (``policy.eval.evaluator.background``).
DI-engine's 8-env settings are ``pong_ppo_8env_config.py``.

Needs the atari extra: ``pip install -c constraints.txt -e ".[atari]"``. Meant for a GPU and 16 CPU cores; on a
machine without CUDA it runs on the CPU, slowly, with a warning.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pong_ppo",
    env=dict(collector_env_num=64, manager=dict(overlap=True)),
    policy=dict(
        cuda=True,
        model=dict(
            actor_head_hidden_size_list=[512],
            critic_head_hidden_size_list=[512],
        ),
        learn=dict(
            epoch_per_collect=4,
            batch_size=512,
            learning_rate=0.00025,
            clip_ratio=0.1,
            entropy_weight=0.01,
        ),
        collect=dict(n_sample=8192),
        eval=dict(evaluator=dict(eval_freq=1600, background=True)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="atari"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
