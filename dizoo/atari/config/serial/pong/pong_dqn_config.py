"""DQN on Pong tuned for wall-clock time on one GPU: ``python dizoo/atari/config/serial/pong/pong_dqn_config.py``.

The settings known to solve Pong in about 400-500k env steps with one env (one update of 32 per env step, a
target synchronised every 1,000 updates, eps from 1 to 0.01 over the first 150k steps, 10k random steps
before learning), with 3-step returns and double dueling Q, on 16 envs stepped in two groups of 8 while the
policy acts on the other (``env.manager.overlap``): 64 transitions per collect, 64 updates after each. It is
evaluated every 50k updates in another process while training goes on (``policy.eval.evaluator.background``).
DI-engine's 8-env settings are ``pong_dqn_8env_config.py``.

Needs the atari extra: ``pip install -c constraints.txt -e ".[atari]"``. Meant for a GPU (``cuda=True``; on a
machine without CUDA it runs on the CPU, slowly, with a warning). Not yet measured to a solve on a GPU
(``python bench/atari_pong.py --algo dqn --minutes 20``: BENCHMARKS.md).
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pong_dqn",
    env=dict(collector_env_num=16, manager=dict(overlap=True)),
    policy=dict(
        cuda=True,
        model=dict(encoder_hidden_size_list=[512]),
        nstep=3,
        random_collect_size=10000,
        learn=dict(
            update_per_collect=64,
            batch_size=32,
            learning_rate=0.0001,
            target_update_freq=1000,
        ),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=50000, background=True)),
        other=dict(eps=dict(type="linear", start=1.0, end=0.01, decay=150000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="atari"),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
