"""Behaviour cloning on CartPole-v1, data-parallel: each rank trains on its own disjoint shard of the
dataset's episodes (docs/offline.md)::

    python dizoo/classic_control/cartpole/config/cartpole_bc_ddp_config.py --nproc 2
    torchrun --nproc_per_node=2 dizoo/classic_control/cartpole/config/cartpole_bc_ddp_config.py

Scales the data per update: the hyperparameters are those of cartpole_bc_config.py, per rank; DDP averages
the gradients, so one update sees ``batch_size * world_size`` transitions, at the single-process learning rate
(no scaling rule: an epoch over the dataset then makes ``1 / world_size`` as many updates).
"""
import copy

from dizoo.classic_control.cartpole.config import cartpole_bc_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "cartpole_bc_ddp"
main_config.policy.multi_gpu = True
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
