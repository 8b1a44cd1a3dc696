"""PPO on Pendulum-v1 (Gaussian actions): ``python dizoo/classic_control/pendulum/config/pendulum_ppo_config.py``.

PPO is far less sample-efficient than SAC here (see pendulum_sac_config.py): expect hundreds of thousands
of env steps.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pendulum_ppo_seed0",
    env=dict(
        collector_env_num=8,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=-250,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=3,
            action_shape=1,
            actor_head_hidden_size_list=[64, 64],
            critic_head_hidden_size_list=[64, 64],
            init_log_std=-0.5,
        ),
        discount_factor=0.95,
        learn=dict(
            epoch_per_collect=10,
            batch_size=256,
            learning_rate=0.0003,
            clip_ratio=0.2,
            value_weight=0.5,
            entropy_weight=0.0,
            adv_norm=True,
            value_clip=True,
        ),
        collect=dict(n_sample=2048, gae_lambda=0.95),
        eval=dict(evaluator=dict(eval_freq=200)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="pendulum"),
    env_manager=dict(type="sync"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
