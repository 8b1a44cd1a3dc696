"""Rainbow on CartPole-v1, data-parallel with DDP. Run with a launcher (2 processes on CPU use gloo; GPUs nccl)::

    baton train -c dizoo/classic_control/cartpole/config/cartpole_rainbow_ddp_config.py --nproc 2
    torchrun --nproc_per_node=2 dizoo/classic_control/cartpole/config/cartpole_rainbow_ddp_config.py

cartpole_rainbow_config.py per rank, with the learning rate doubled for the doubled global batch (the linear
scaling rule, as cartpole_dqn_ddp_config.py). Each rank keeps its own prioritized buffer (its priorities are
its own samples' losses) and draws its own noise for its noisy layers, seeded ``seed + rank``: the ranks explore
differently by design, and DDP averages gradients computed under different noise draws. ``baton check-ddp -c
THIS`` compares the update with the noise off on every rank (policies/noisy.py). Alone (no launcher) it runs
as one process, with a warning.
"""
import copy

from dizoo.classic_control.cartpole.config import cartpole_rainbow_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "cartpole_rainbow_ddp"
main_config.policy.multi_gpu = True
main_config.policy.learn.learning_rate = 2 * base.main_config.policy.learn.learning_rate
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
