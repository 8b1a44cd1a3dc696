"""PPO on Taxi-v4 with its legal-action mask: ``python dizoo/toy_text/config/taxi_ppo_config.py``.

The mask comes from Taxi's ``info["action_mask"]`` with no setting (``dizoo/toy_text/envs.py``); the 500 states
go through an embedding. PPO's defaults (SB3's: 2,048 steps a collect on 8 envs, 10 epochs of minibatches of
64) with a learning rate of 1e-3 and an entropy bonus of 0.01.

What mattered, measured on seeds 0-2 at 300k env steps (``baton train --algo ppo --env Taxi-v4`` with overrides,
env steps to the first evaluation at 8, gymnasium's threshold): the defaults reached it at 118k and 172k and not
on seed 2 (its policy collapsed to -74 by the end); the entropy bonus alone at 176k, 114k and 211k; with the rate
raised to 1e-3 too, 94k, 51k and 106k. Minibatches of 256 over 4 epochs did not reach it. The side-by-side with
sb3-contrib's MaskablePPO, and the same without the mask: BENCHMARKS.md, "Masked Taxi".
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="taxi_ppo",
    policy=dict(learn=dict(learning_rate=1e-3, entropy_weight=0.01)),
))
create_config = EasyDict(dict(
    env=dict(type="taxi"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
