"""Behaviour cloning on CartPole-v1 from the dataset ``cartpole/expert-v0`` (greedy DQN; build it with
``python dizoo/classic_control/make_datasets.py``): ``python dizoo/classic_control/cartpole/config/cartpole_bc_config.py``.

Offline: the policy never acts in the env while it learns; rank 0 evaluates it on the real env every
``eval_freq`` updates. ``baton train -c`` this file, ``--nproc 2`` or torchrun split the dataset's episodes
across the ranks (docs/offline.md).
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_bc",
    env=dict(),  # every env value is the default (stop value 475, CartPole-v1's threshold)
    dataset=dict(name="cartpole/expert-v0"),
    policy=dict(
        model=dict(hidden_size_list=[64, 64]),
        learn=dict(batch_size=128),
        eval=dict(evaluator=dict(eval_freq=200)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole"),
    policy=dict(type="bc"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
