"""A2C on CartPole-v1: ``python dizoo/classic_control/cartpole/config/cartpole_a2c_config.py [--seed N]``."""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_a2c",
    policy=dict(
        learn=dict(batch_size=40, learning_rate=0.001),
        collect=dict(n_sample=40),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole"),
    policy=dict(type="a2c"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
