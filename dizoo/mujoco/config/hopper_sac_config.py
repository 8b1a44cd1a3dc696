"""SAC on Hopper-v5: ``python dizoo/mujoco/config/hopper_sac_config.py [--seed N] [--max-env-step N]``.

Needs the mujoco extra: ``pip install "baton-rl[mujoco]"``. Settings of CleanRL's ``sac_continuous_action.py``
(Huang et al., 2022; its MuJoCo benchmark): one env, one update of 256 transitions per env step, networks of
256x256, Q learning rate 1e-3, actor 3e-4, temperature 1e-3 from alpha 1 (log alpha 0) tuned towards an
entropy of -action_dim, Polyak 0.005, a replay of 1M, 5,000 uniformly random env steps before learning.
CleanRL updates its actor twice every second step; here once every step (as many actor updates). No
observation normalisation, as in CleanRL and the SB3 zoo's SAC. Evaluation: 5 greedy episodes every 5,000
updates. The budget is the caller's (the reference runs 1M env steps); the stop value is the env's.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="hopper_sac",
    env=dict(),  # the mujoco family's defaults: 1 collecting env, 5 evaluation episodes
    policy=dict(
        random_collect_size=5000,
        learn=dict(learning_rate_policy=3e-4, learning_rate_alpha=1e-3, alpha=1.0),
        eval=dict(evaluator=dict(eval_freq=5000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="hopper"),
    policy=dict(type="sac"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
