"""PPO on CartPole-v1: ``python dizoo/classic_control/cartpole/config/cartpole_ppo_config.py [--seed N]``."""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_ppo",
    env=dict(),  # every env value is the default; the empty section lets callers set main_config.env.<key>
    policy=dict(
        discount_factor=0.98,
        learn=dict(batch_size=128, learning_rate=0.001),
        collect=dict(n_sample=256, gae_lambda=0.8),
        eval=dict(evaluator=dict(eval_freq=40)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
