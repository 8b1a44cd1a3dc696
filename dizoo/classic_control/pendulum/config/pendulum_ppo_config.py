"""PPO on Pendulum-v1 (Gaussian actions): ``python dizoo/classic_control/pendulum/config/pendulum_ppo_config.py``.

PPO is far less sample-efficient than SAC here (see pendulum_sac_config.py): expect hundreds of thousands
of env steps.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pendulum_ppo",
    policy=dict(
        model=dict(init_log_std=-0.5),
        discount_factor=0.95,
        learn=dict(batch_size=256, value_clip=True),
        eval=dict(evaluator=dict(eval_freq=200)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="pendulum"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
