"""Recurrent PPO (``ppo_lstm``) on CartPole-v1 with its velocities hidden (env type ``cartpole_masked``)::

    python dizoo/classic_control/cartpole/config/cartpole_masked_ppo_lstm_config.py [--seed N]

An observation is ``[x, theta]`` alone; the LSTM's memory of the steps before lets the policy infer the
velocities that feed-forward PPO (cartpole_masked_ppo_config.py, best 56 in 100k env steps) cannot see. Seeds
0, 1 and 2 reached 195 (CartPole-v0's level, then the stop value; now CartPole-v1's 475) at 18,432, 14,336 and 16,384 env steps (288, 224 and 256 updates; 80,
62 and 37 s of training on the shared 2-core machine at a load average of 4 to 6). Each collect is 64 steps of
8 envs, learned as 4 sequences of 16 steps per env, in 4 epochs of 2 minibatches of 16 sequences
(docs/recurrent_ppo.md).
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_masked_ppo_lstm",
    env=dict(),  # the defaults: 8 collecting envs
    policy=dict(  # the defaults too: discount 0.99, GAE lambda 0.95, minibatches of 256 steps (16 sequences)
        learn=dict(epoch_per_collect=4, seq_len=16, learning_rate=0.001),
        collect=dict(n_sample=512),  # 64 steps per env: 4 sequences of 16 each
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
