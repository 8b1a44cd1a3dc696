"""TD3 on Pendulum-v1: ``python dizoo/classic_control/pendulum/config/pendulum_td3_config.py [--seed N]``.

The settings of pendulum_sac_config.py (smaller networks, 4 envs, 4 updates of 128 per 4 env steps, a faster
target), with TD3's own: policy delay 2, target smoothing 0.2 clipped at 0.5, exploration noise 0.1.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pendulum_td3",
    env=dict(collector_env_num=4),
    policy=dict(
        model=dict(
            actor_head_hidden_size_list=[128, 128],
            critic_head_hidden_size_list=[128, 128],
        ),
        learn=dict(update_per_collect=4, batch_size=128, learning_rate_q=1e-3, learning_rate_policy=1e-3,
                   target_theta=0.02),
        collect=dict(n_sample=4),
        other=dict(replay_buffer=dict(replay_buffer_size=100000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="pendulum"),
    policy=dict(type="td3"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
