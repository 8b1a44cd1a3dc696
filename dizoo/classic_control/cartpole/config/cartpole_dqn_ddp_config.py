"""DQN on CartPole-v1, data-parallel with DDP. Run with a launcher (2 processes on CPU use gloo; GPUs nccl)::

    python -m torch.distributed.launch --nproc_per_node=2 --master_port=29501 dizoo/classic_control/cartpole/config/cartpole_dqn_ddp_config.py
    torchrun --nproc_per_node=2 dizoo/classic_control/cartpole/config/cartpole_dqn_ddp_config.py

Each rank collects ``n_sample`` transitions into its own buffer and updates on its own batches; DDP averages
the gradients, so the global batch is ``batch_size * world_size``. Alone (no launcher) it runs as one
process, with a warning.

Scales the data per update: the hyperparameters are those of cartpole_dqn_config.py, per rank, except the
learning rate: with 2 ranks the global batch doubles and the rate doubles with it (the linear scaling rule). With it each rank needs
fewer env steps to solve than one process.
"""
import copy

from dizoo.classic_control.cartpole.config import cartpole_dqn_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "cartpole_dqn_ddp"
main_config.policy.multi_gpu = True
main_config.policy.learn.learning_rate = 0.004
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
