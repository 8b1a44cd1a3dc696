"""PPO on Pong tuned for wall-clock time on one GPU: ``python dizoo/atari/config/serial/pong/pong_ppo_config.py``.

rl_games' EnvPool Pong settings (quoted to reach a score of 18 or more after about 1M env steps): 64 envs x 128
steps per collect (8,192 transitions), minibatches of 2,048, 4 epochs, clip 0.2, entropy 0.01. The 64 envs
step in two groups of 32, one stepping (ale-py's own threads) while the policy acts on the other
(``env.manager.overlap``). One evaluation every 400 updates (25 collects, about 200k env steps), in another
process while training goes on (``policy.eval.evaluator.background``).
DI-engine's 8-env settings are ``pong_ppo_8env_config.py``.

Needs the atari extra: ``pip install -c constraints.txt -e ".[atari]"``. Meant for a GPU and 16 CPU cores; on a
machine without CUDA it runs on the CPU, slowly, with a warning. On an H200 it had not left -21 after
1.05M env steps (3.5 minutes; BENCHMARKS.md, "The first GPU run"): not a solve yet
(``python bench/atari_pong.py --minutes 10`` measures it).
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
            batch_size=2048,
            entropy_weight=0.01,
        ),
        collect=dict(n_sample=8192),
        eval=dict(evaluator=dict(eval_freq=400, background=True)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="atari"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
