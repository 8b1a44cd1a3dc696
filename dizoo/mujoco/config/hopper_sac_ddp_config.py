"""SAC on Hopper-v5, data-parallel with DDP::

    baton train -c dizoo/mujoco/config/hopper_sac_ddp_config.py --nproc 2
    torchrun --nproc_per_node=2 dizoo/mujoco/config/hopper_sac_ddp_config.py

Scales the data per update: hopper_sac_config.py (CleanRL's settings) per rank, so each update averages the
gradients of ``batch_size * world_size`` transitions and the ranks together collect ``world_size`` times as
much per iteration, at the single-process learning rates (no scaling rule, as pendulum_sac_ddp_config.py).
Each rank keeps its own replay buffer; the random warm-up counts global env steps.
"""
import copy

from dizoo.mujoco.config import hopper_sac_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "hopper_sac_ddp"
main_config.policy.multi_gpu = True
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
