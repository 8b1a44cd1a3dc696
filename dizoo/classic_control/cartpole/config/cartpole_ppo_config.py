"""PPO on CartPole-v1: ``python dizoo/classic_control/cartpole/config/cartpole_ppo_config.py [--seed N]``."""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_ppo_seed0",
    env=dict(
        collector_env_num=8,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=195,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=4,
            action_shape=2,
            actor_head_hidden_size_list=[64, 64],
            critic_head_hidden_size_list=[64, 64],
        ),
        discount_factor=0.98,
        learn=dict(
            epoch_per_collect=10,
            batch_size=128,
            learning_rate=0.001,
            clip_ratio=0.2,
            value_weight=0.5,
            entropy_weight=0.0,
            adv_norm=True,
        ),
        collect=dict(n_sample=256, gae_lambda=0.8),
        eval=dict(evaluator=dict(eval_freq=40)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole"),
    env_manager=dict(type="sync"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
