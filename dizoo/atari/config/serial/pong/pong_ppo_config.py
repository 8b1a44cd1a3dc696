"""PPO on Pong tuned for wall-clock time on one GPU: ``python dizoo/atari/config/serial/pong/pong_ppo_config.py``.

Based on rl_games' EnvPool Pong config (``rl_games/configs/atari/ppo_pong_envpool.yaml``; its docs/ENVPOOL.md
reports a score of 20 after 179 collects, 1.47M env steps, 3.2 minutes at ~7.5k env steps/s): 64 envs x 128
steps per collect (8,192 transitions), minibatches of 2,048, 4 epochs, clip 0.2, entropy 0.01, and its
adaptive learning rate: from 3e-4, multiplied by 1.5 after an epoch whose mean KL stayed under 0.005 and divided
by 1.5 after one over 0.02 (``policy.learn.lr_schedule='adaptive'``, ``kl_threshold=0.01``). That schedule is
what lets 16 large minibatches per collect learn: without it (a constant 3e-4) an H200 run had not left -21
after 1.05M env steps (3.5 minutes; BENCHMARKS.md, "The first GPU run"), with approx KL 0.003 and a clip
fraction of 0.014 per update. Not taken from rl_games: its running normalisation of the input frames and of
the value targets (critic weight 2), ELU activations and gradient-norm clip of 1; the network, losses and
gradient clip here are CleanRL's ``ppo_atari`` (Nature CNN, orthogonal init, Adam eps 1e-5, per-minibatch
advantage normalisation, value weight 0.5, gradient norm 0.5). With this schedule the result on a GPU is
pending: ``python bench/atari_pong.py --minutes 5 --skip-throughput`` measures it.

The 64 envs step in two groups of 32, one stepping (ale-py's own threads) while the policy acts on the other
(``env.manager.overlap``). One evaluation every 400 updates (25 collects, about 200k env steps), in another
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
            batch_size=2048,
            entropy_weight=0.01,
            lr_schedule="adaptive",
            kl_threshold=0.01,
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
