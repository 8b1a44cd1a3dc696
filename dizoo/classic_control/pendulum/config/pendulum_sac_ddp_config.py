"""SAC on Pendulum-v1, data-parallel with DDP::

    torchrun --nproc_per_node=2 dizoo/classic_control/pendulum/config/pendulum_sac_ddp_config.py

Scales the data per update: pendulum_sac_config.py per rank, so each update averages the gradients of
``batch_size * world_size`` transitions and the ranks together collect ``world_size`` times as much per
iteration, at the single-process learning rates (no scaling rule). The actor, twin critic and temperature
are one module trained by one backward per update, so the ddp middleware wraps all of them; each rank keeps
its own replay buffer.
"""
import copy

from dizoo.classic_control.pendulum.config import pendulum_sac_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "pendulum_sac_ddp"
main_config.policy.multi_gpu = True
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
