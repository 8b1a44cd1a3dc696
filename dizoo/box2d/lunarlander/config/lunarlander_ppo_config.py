"""PPO on LunarLander-v3 (discrete): ``python dizoo/box2d/lunarlander/config/lunarlander_ppo_config.py``.

Needs the box2d extra: ``pip install -c constraints.txt -e ".[box2d]"``.

Reaches an evaluation mean of 200 in 272,000 to 453,000 env steps, about 4 to 6 minutes of training on 2
CPU cores (seeds 0-2; BENCHMARKS.md, "Scores")::

    python bench/time_to_solve.py --config dizoo/box2d/lunarlander/config/lunarlander_ppo_config.py --max-env-step 2000000
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
