"""DQN on Taxi-v4 with its legal-action mask: ``python dizoo/toy_text/config/taxi_dqn_config.py``.

The mask comes from Taxi's ``info["action_mask"]`` with no setting (``dizoo/toy_text/envs.py``): the greedy
action, the epsilon-greedy draw and the target's max over next actions all keep to legal actions; the 500 states
go through an embedding. Against DQN's defaults (tuned for CartPole's speed), one update per 4 env steps (SB3's
``train_freq=4``; the defaults make one per 32), a target network refreshed every 500 updates and exploration
decaying over 30k env steps.

What mattered, measured on seed 0 (``baton train --algo dqn --env Taxi-v4`` with overrides, 200k env steps):
the defaults' best evaluation was -115 (the greedy policy loops to the 200-step limit); with 3-step returns and a
rate of 5e-4 as well, -200 throughout; the update rate was what was missing: with 16 updates per collect of 64,
the evaluation first reached 8 (gymnasium's threshold) at 41k env steps. Seeds 0-2, with and without the mask:
BENCHMARKS.md, "Masked Taxi".
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="taxi_dqn",
    policy=dict(
        learn=dict(update_per_collect=16, target_update_freq=500),
        collect=dict(n_sample=64),
        other=dict(eps=dict(decay=30_000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="taxi"),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
