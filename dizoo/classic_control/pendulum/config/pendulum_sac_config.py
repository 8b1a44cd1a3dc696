"""SAC on Pendulum-v1: ``python dizoo/classic_control/pendulum/config/pendulum_sac_config.py [--seed N]``."""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pendulum_sac_seed0",
    env=dict(
        collector_env_num=4,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=-250,
    ),
    policy=dict(
        cuda=False,
        random_collect_size=1000,
        model=dict(
            obs_shape=3,
            action_shape=1,
            actor_head_hidden_size_list=[128, 128],
            critic_head_hidden_size_list=[128, 128],
        ),
        discount_factor=0.99,
        learn=dict(
            update_per_collect=4,
            batch_size=128,
            learning_rate_q=0.001,
            learning_rate_policy=0.001,
            learning_rate_alpha=0.0003,
            target_theta=0.005,
            alpha=0.2,
            auto_alpha=True,
        ),
        collect=dict(n_sample=4),
        eval=dict(evaluator=dict(eval_freq=1000)),
        other=dict(replay_buffer=dict(replay_buffer_size=100000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="pendulum"),
    env_manager=dict(type="sync"),
    policy=dict(type="sac"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
