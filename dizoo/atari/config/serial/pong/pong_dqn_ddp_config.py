"""DQN on Pong, data-parallel with DDP (the field's reference DDP example)::

    python -m torch.distributed.launch --nproc_per_node=2 ./dizoo/atari/config/serial/pong/pong_dqn_ddp_config.py
    torchrun --nproc_per_node=2 dizoo/atari/config/serial/pong/pong_dqn_ddp_config.py

Scales the data per update: pong_dqn_8env_config.py (8 envs, DI-engine's settings) per rank, so each update
averages the gradients of ``batch_size * world_size`` transitions, at the single-process learning rate (no
scaling rule, as DI-engine's example). On GPUs each rank uses cuda:LOCAL_RANK and nccl.

A file of its own though it changes nothing but the name: DI-engine's launch line above names it. Every other
config runs data-parallel as it is (``baton train -c CONFIG --gpus all``); a ``_ddp_`` config exists only
where data-parallel training needs other settings, which its docstring gives.
"""
import copy

from dizoo.atari.config.serial.pong import pong_dqn_8env_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "pong_dqn_ddp"
main_config.policy.multi_gpu = True
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
