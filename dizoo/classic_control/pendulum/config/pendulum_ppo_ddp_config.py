"""PPO on Pendulum-v1, data-parallel with DDP::

    baton train -c dizoo/classic_control/pendulum/config/pendulum_ppo_ddp_config.py --nproc 2
    torchrun --nproc_per_node=2 dizoo/classic_control/pendulum/config/pendulum_ppo_ddp_config.py

Keeps the single-process data per update: pendulum_ppo_config.py split over 2 ranks. Each rank steps 2 envs
x 1,024 steps per collect and runs the 10 epochs over its 2,048 transitions in minibatches of 32; DDP
averages the gradients (the advantages are normalised over both ranks' minibatches), so each update sees a
global minibatch of 64 and each collect is 4,096 transitions, as in one process, at the same learning rate.
With more ranks, divide ``collector_env_num``, ``n_sample`` and ``batch_size`` by the world size to keep
those figures.
"""
import copy

from dizoo.classic_control.pendulum.config import pendulum_ppo_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "pendulum_ppo_ddp"
main_config.policy.multi_gpu = True
main_config.env.collector_env_num = 2
main_config.policy.collect.pop("n_sample")  # 2,048 per rank: the default
main_config.policy.learn.batch_size = 32
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
