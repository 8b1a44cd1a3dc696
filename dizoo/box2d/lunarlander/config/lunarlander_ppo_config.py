"""PPO on LunarLander-v3 (discrete): ``python dizoo/box2d/lunarlander/config/lunarlander_ppo_config.py``.

Needs the box2d extra: ``pip install -c constraints.txt -e ".[box2d]"``.

Stops at gymnasium's ``reward_threshold`` for LunarLander, 200. Reaches an evaluation mean of 200 in 278,528 to
393,216 env steps, 40 to 54 s of training on one core (seeds 0-2, 2026-11-28)::

    python bench/time_to_solve.py --config dizoo/box2d/lunarlander/config/lunarlander_ppo_config.py --max-env-step 2000000

At rl-baselines3-zoo's budget, 1M env steps with ``env.stop_value=none``, it ends at 259.8, 268.8 and 273.9 (seeds
0-2, IQM 267.5) against SB3's 266.3, 254.6 and 258.7 with the zoo's settings, in 114 s against 628 s a run
(``python bench/peers.py --tasks lunarlander-ppo``; BENCHMARKS.md, "Scores that hold"). Rollouts of 4,096 (512
steps of each of 8 envs): with 1,024 the run ended 266.5, 215.4 and 270.3 in the same harness.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="lunarlander_ppo",
    env=dict(
        evaluator_env_num=8,
        n_evaluator_episode=8,
    ),
    policy=dict(
        discount_factor=0.999,
        learn=dict(
            epoch_per_collect=4,
            entropy_weight=0.01,
        ),
        collect=dict(n_sample=4096, gae_lambda=0.98),
        eval=dict(evaluator=dict(eval_freq=500)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="lunarlander"),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
