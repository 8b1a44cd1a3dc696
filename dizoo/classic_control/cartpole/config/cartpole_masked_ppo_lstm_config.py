"""Recurrent PPO (``ppo_lstm``) on CartPole-v1 with its velocities hidden (env type ``cartpole_masked``)::

    python dizoo/classic_control/cartpole/config/cartpole_masked_ppo_lstm_config.py [--seed N]

An observation is ``[x, theta]`` alone; the LSTM's memory of the steps before lets the policy infer the
velocities that feed-forward PPO (cartpole_masked_ppo_config.py, best 56 in 100k env steps) cannot see. Each
collect is 64 steps of 8 envs, learned as 4 sequences of 16 steps per env, in 4 epochs of 2 minibatches of 16
sequences (docs/recurrent_ppo.md).

Stops at CartPole-v1's threshold, 475: seeds 0-2 reached it at 32,768, 28,672 and 12,288 env steps, 7.1, 5.8 and
2.5 s of training on one core (2026-11-29, ``python bench/time_to_solve.py --config
dizoo/classic_control/cartpole/config/cartpole_masked_ppo_lstm_config.py --max-env-step 200000``). At
rl-baselines3-zoo's budget, 100,000 env steps with ``env.stop_value=none``, seeds 0-7 ended at 500, 481.3, 500,
489.4, 500, 500, 500 and 500 (BENCHMARKS.md, "Scores that hold"). Why the rate falls linearly to 0 over those
100,000 env steps (``lr_anneal_env_steps``: a run given no budget anneals over them too, and learns no more after
them) and rewards are normalised: with a constant rate and raw rewards the policy reached 500 and fell back to
190 and 140 on seeds 1 and 2 by the end; the critic, learning returns of about 100 through the same clipped
gradient norm as the actor, kept moving it. Either change alone ended 2 or 3 seeds of 5 at 475; both, 8 of 8.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_masked_ppo_lstm",
    env=dict(),  # the defaults: 8 collecting envs
    policy=dict(  # the defaults too: discount 0.99, GAE lambda 0.95, minibatches of 256 steps (16 sequences)
        learn=dict(epoch_per_collect=4, seq_len=16, learning_rate=0.001,
                   lr_schedule="linear", lr_anneal_env_steps=100_000),  # to 0 at 100k env steps: the zoo's budget
        collect=dict(n_sample=512),  # 64 steps per env: 4 sequences of 16 each
        reward_norm=True,  # the critic learns returns of order 1, not the ~100 of a balanced pole
        eval=dict(evaluator=dict(eval_freq=16)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole_masked"),
    policy=dict(type="ppo_lstm"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
