"""TD3+BC on Pendulum-v1, data-parallel: each rank trains on its own disjoint shard of the dataset's
episodes (docs/offline.md)::

    python dizoo/classic_control/pendulum/config/pendulum_td3bc_ddp_config.py --nproc 2
    torchrun --nproc_per_node=2 dizoo/classic_control/pendulum/config/pendulum_td3bc_ddp_config.py

Scales the data per update: the hyperparameters are those of pendulum_td3bc_config.py, per rank; DDP
averages the gradients, so one update sees ``batch_size * world_size`` transitions, at the single-process
learning rates (no scaling rule). The actor and the twin critic are one module trained by
one backward per update (the actor's loss weighted 0 on the updates TD3 skips), so the ddp middleware
wraps both.
"""
import copy

from dizoo.classic_control.pendulum.config import pendulum_td3bc_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "pendulum_td3bc_ddp"
main_config.policy.multi_gpu = True
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
