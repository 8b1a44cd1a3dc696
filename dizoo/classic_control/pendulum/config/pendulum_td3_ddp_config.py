"""TD3 on Pendulum-v1, data-parallel with DDP::

    torchrun --nproc_per_node=2 dizoo/classic_control/pendulum/config/pendulum_td3_ddp_config.py

Scales the data per update: pendulum_td3_config.py per rank, so each update averages the gradients of
``batch_size * world_size`` transitions and the ranks together collect ``world_size`` times as much per
iteration, at the single-process learning rates (no scaling rule). Actor and twin critics are one module
trained by one backward per update (the delayed actor weighted 0 off its steps), so the ddp middleware wraps
all of them; each rank keeps its own replay buffer. The target smoothing noise is drawn for the global batch,
so ``baton check-ddp -c THIS --nproc 2`` finds the data-parallel update equal to one process's.
"""
import copy

from dizoo.classic_control.pendulum.config import pendulum_td3_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "pendulum_td3_ddp"
main_config.policy.multi_gpu = True
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
