"""PPO on Pong, data-parallel with DDP (the field's reference DDP example)::

    python -m torch.distributed.launch --nproc_per_node=2 ./dizoo/atari/config/serial/pong/pong_ppo_ddp_config.py
    torchrun --nproc_per_node=2 dizoo/atari/config/serial/pong/pong_ppo_ddp_config.py

Scales the data per update: pong_ppo_8env_config.py (8 envs, DI-engine's settings) per rank, so each update
averages the gradients of ``batch_size * world_size`` transitions (advantages normalised over all of them),
at the single-process learning rate (no scaling rule, as DI-engine's example). On GPUs each rank uses
cuda:LOCAL_RANK and nccl.
"""
import copy

from dizoo.atari.config.serial.pong import pong_ppo_8env_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "pong_ppo_ddp"
main_config.policy.multi_gpu = True
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
