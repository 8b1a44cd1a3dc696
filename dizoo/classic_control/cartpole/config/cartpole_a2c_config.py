"""A2C on CartPole-v1: ``python dizoo/classic_control/cartpole/config/cartpole_a2c_config.py [--seed N]``."""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_a2c_seed0",
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
        discount_factor=0.99,
        learn=dict(
            epoch_per_collect=1,
            batch_size=40,
            learning_rate=0.001,
            value_weight=0.5,
            entropy_weight=0.01,
            adv_norm=True,
        ),
        collect=dict(n_sample=40, gae_lambda=1.0),
        eval=dict(evaluator=dict(eval_freq=100)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole"),
    env_manager=dict(type="sync"),
    policy=dict(type="a2c"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
