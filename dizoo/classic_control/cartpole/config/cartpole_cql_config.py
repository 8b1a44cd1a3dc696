"""Discrete CQL on CartPole-v1 from the dataset ``cartpole/medium-v0`` (an eps-greedy expert whose
episodes return about 100-150; build it with ``python dizoo/classic_control/make_datasets.py``):
``python dizoo/classic_control/cartpole/config/cartpole_cql_config.py``.

Offline: the policy never acts in the env while it learns; rank 0 evaluates it on the real env every
``eval_freq`` updates and stops at 195, CartPole-v0's level (DI-engine's stop value for CartPole), not at
CartPole-v1's threshold, 475, where the online configs stop: from a dataset whose episodes return 100-150 the
task is to beat the data, and the policy is judged on that (it went on to 500 on 2 ranks; docs/offline.md).
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_cql",
    env=dict(stop_value=195),  # CartPole-v0's level: the docstring says why
    dataset=dict(name="cartpole/medium-v0"),
    policy=dict(
        model=dict(encoder_hidden_size_list=[64, 64]),
        learn=dict(batch_size=128),
        eval=dict(evaluator=dict(eval_freq=200)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole"),
    policy=dict(type="cql"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
