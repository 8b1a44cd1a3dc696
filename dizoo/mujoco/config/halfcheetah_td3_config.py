"""TD3 on HalfCheetah-v5: ``python dizoo/mujoco/config/halfcheetah_td3_config.py [--seed N] [--max-env-step N]``.

Needs the mujoco extra: ``pip install "baton-rl[mujoco]"``. Settings of CleanRL's ``td3_continuous_action.py``
(Huang et al., 2022; its MuJoCo benchmark), the TD3 authors' later defaults and LeanRL's, the anchor of
``bench/offpolicy_gpu.py``: one env, one update of 256 transitions per env step, networks of 256x256, learning
rate 3e-4, the actor and targets every 2nd update, target smoothing 0.2 clipped at 0.5, exploration noise 0.1,
Polyak 0.005, a replay of 1M, 25,000 uniformly random env steps before learning (the policy's defaults but the
warm-up). No observation normalisation, as in CleanRL and the SB3 zoo's TD3. Evaluation: 5 greedy episodes every
5,000 updates. HalfCheetah never terminates: every episode runs its 1,000 steps and ends truncated,
bootstrapping from its last observation.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="halfcheetah_td3",
    env=dict(),  # the mujoco family's defaults: 1 collecting env, 5 evaluation episodes
    policy=dict(
        random_collect_size=25000,
        eval=dict(evaluator=dict(eval_freq=5000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="halfcheetah"),
    policy=dict(type="td3"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
