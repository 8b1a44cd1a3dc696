"""PPO on CartPole-v1, data-parallel with DDP::

    torchrun --nproc_per_node=2 dizoo/classic_control/cartpole/config/cartpole_ppo_ddp_config.py
    python -m torch.distributed.launch --nproc_per_node=2 --master_port=29501 dizoo/classic_control/cartpole/config/cartpole_ppo_ddp_config.py

Keeps the single-process data per update: cartpole_ppo_config.py split over 2 ranks. Each rank steps 4 envs
for 128 transitions per collect and runs the 10 epochs over them in minibatches of 64; DDP averages the
gradients and the advantages are normalised over both ranks' minibatches, so each update is the
single-process update on a global minibatch of 128 from a collect of 256, at the same learning rate. With
more ranks, divide ``collector_env_num``, ``n_sample`` and ``batch_size`` by the world size.
"""
import copy

from dizoo.classic_control.cartpole.config import cartpole_ppo_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "cartpole_ppo_ddp"
main_config.policy.multi_gpu = True
main_config.env.collector_env_num = 4
main_config.policy.collect.n_sample = 128
main_config.policy.learn.pop("batch_size")  # 64 per rank: the default
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
