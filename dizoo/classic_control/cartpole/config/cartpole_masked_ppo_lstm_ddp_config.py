"""Recurrent PPO on masked CartPole, data-parallel with DDP::

    torchrun --nproc_per_node=2 dizoo/classic_control/cartpole/config/cartpole_masked_ppo_lstm_ddp_config.py
    baton check-ddp -c dizoo/classic_control/cartpole/config/cartpole_masked_ppo_lstm_ddp_config.py

Keeps the single-process data per update: cartpole_masked_ppo_lstm_config.py split over 2 ranks. Each rank
steps 4 envs, holding their memories (each rank its own envs' rows), for 256 transitions per collect (64 steps
per env, 4 sequences of 16 each), and learns in minibatches of 8 sequences (128 transitions); DDP averages the
gradients and the advantages are normalised over both ranks' minibatches, so each update is the
single-process update on a global minibatch of 16 sequences, at the same learning rate.
"""
import copy

from dizoo.classic_control.cartpole.config import cartpole_masked_ppo_lstm_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "cartpole_masked_ppo_lstm_ddp"
main_config.policy.multi_gpu = True
main_config.env.collector_env_num = 4
main_config.policy.collect.n_sample = 256
main_config.policy.learn.batch_size = 128
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
