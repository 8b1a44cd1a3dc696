"""Rainbow on CartPole-v1: ``python dizoo/classic_control/cartpole/config/cartpole_rainbow_config.py [--seed N]``.

Rainbow's pieces all on (``policies.rainbow``: C51 head, noisy layers instead of epsilon, prioritized replay,
3-step returns, dueling, double Q), with the learning settings of cartpole_dqn_config.py, which were tuned for
wall-clock time to an evaluation mean of 195: small collects followed by a few large-step updates, and frequent
evaluation. The support [0, 100] covers CartPole's returns: a reward of 1 per step at discount 0.99 makes
values below 1 / (1 - 0.99) = 100, and never below 0.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_rainbow",
    env=dict(),  # every env value is the default; the empty section lets callers set main_config.env.<key>
    policy=dict(
        model=dict(encoder_hidden_size_list=[64, 64], v_min=0.0, v_max=100.0),
        nstep=3,
        learn=dict(
            update_per_collect=8,
            learning_rate=0.002,
        ),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=50)),
        other=dict(replay_buffer=dict(replay_buffer_size=20000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole"),
    policy=dict(type="rainbow"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
