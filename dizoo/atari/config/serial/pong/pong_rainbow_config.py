"""Rainbow on Pong on one GPU: ``python dizoo/atari/config/serial/pong/pong_rainbow_config.py``.

Hessel et al.'s Atari agent (``policies.rainbow``: C51 over [-10, 10] on the clipped rewards, 51 atoms, noisy
layers with sigma0 0.5 and no epsilon, prioritized replay with alpha 0.5 and beta 0.4, 3-step returns,
dueling, double Q), on the collection of ``pong_dqn_config.py`` (16 envs stepped in two overlapped groups of 8,
64 transitions per collect, 64 updates of 32 after each: one update per env step, four times the paper's
replay ratio, which the data-efficient Rainbow of van Hasselt et al. (2019) shows pays on a small budget).
The learning rate is DQN's 1e-4 (the paper's 6.25e-5 assumed four times fewer updates), the target network is
synchronised every 2,000 updates, and 20k random transitions (the paper's 80k frames) fill the buffer first.

Needs the atari extra: ``pip install -c constraints.txt -e ".[atari]"``. Meant for a GPU (``cuda=True``; on a
machine without CUDA it runs on the CPU, slowly, with a warning). Not yet measured to a solve on a GPU
(``python bench/atari_pong.py --algo rainbow --minutes 20 --envs 16 --skip-throughput``: BENCHMARKS.md).
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pong_rainbow",
    env=dict(collector_env_num=16, manager=dict(overlap=True)),
    policy=dict(
        cuda=True,
        model=dict(encoder_hidden_size_list=[512], v_min=-10.0, v_max=10.0),
        random_collect_size=20000,
        learn=dict(
            update_per_collect=64,
            batch_size=32,
            learning_rate=0.0001,
            target_update_freq=2000,
        ),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=50000, background=True)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="atari"),
    policy=dict(type="rainbow"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
