"""Feed-forward PPO on CartPole-v1 with its velocities hidden (env type ``cartpole_masked``): the contrast.

    python dizoo/classic_control/cartpole/config/cartpole_masked_ppo_config.py [--seed N]

The settings of cartpole_ppo_config.py, which solve the fully observed task in a few hundred updates. Here
an observation is ``[x, theta]`` alone: a feed-forward policy cannot tell a pole falling left from one
swinging back, and stays far below 195 (CartPole-v0's level; the stop value is 475): seed 0 reached a best evaluation of 56.0 (last 42.8)
in 100,000 env steps and 7,820 updates (``--max-env-step 100000``; BENCHMARKS.md). A policy with memory is what this
task needs: recurrent PPO (cartpole_masked_ppo_lstm_config.py, docs/recurrent_ppo.md) reaches 475 in 12-33k env steps.
"""
import copy

from dizoo.classic_control.cartpole.config import cartpole_ppo_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "cartpole_masked_ppo"
create_config = copy.deepcopy(base.create_config)
create_config.env = dict(type="cartpole_masked")

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
