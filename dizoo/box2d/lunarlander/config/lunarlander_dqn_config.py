"""DQN on LunarLander-v3 (discrete): ``python dizoo/box2d/lunarlander/config/lunarlander_dqn_config.py``.

Needs the box2d extra: ``pip install -c constraints.txt -e ".[box2d]"``.

Reaches an evaluation mean of 200 in 122,000 to 141,000 env steps, about 2 minutes of training on 2 CPU
cores (seeds 0-2; BENCHMARKS.md, "Scores")::

    python bench/time_to_solve.py --config dizoo/box2d/lunarlander/config/lunarlander_dqn_config.py --max-env-step 500000
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="lunarlander_dqn",
    env=dict(
        evaluator_env_num=8,
        n_evaluator_episode=8,
    ),
    policy=dict(
        model=dict(encoder_hidden_size_list=[512, 64]),
        nstep=3,
        learn=dict(update_per_collect=32, batch_size=128),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=1000)),
        other=dict(eps=dict(end=0.1, decay=12000)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="lunarlander"),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
