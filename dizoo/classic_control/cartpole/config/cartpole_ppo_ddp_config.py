"""PPO on CartPole-v1, data-parallel with DDP::

    torchrun --nproc_per_node=2 dizoo/classic_control/cartpole/config/cartpole_ppo_ddp_config.py
    python -m torch.distributed.launch --nproc_per_node=2 --master_port=29501 dizoo/classic_control/cartpole/config/cartpole_ppo_ddp_config.py

cartpole_ppo_config.py per rank: each rank collects n_sample transitions and runs the same epochs of
minibatches; DDP averages the gradients.
"""
import copy

from dizoo.classic_control.cartpole.config import cartpole_ppo_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "cartpole_ppo_ddp"
main_config.policy.multi_gpu = True
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
