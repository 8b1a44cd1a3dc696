"""MAPPO on MPE Simple Spread (3 agents): ``python dizoo/pettingzoo/config/simple_spread_mappo_config.py
--max-env-step 1500000`` (the task has no threshold: give a budget).

The MAPPO paper's MPE settings (Yu et al., 2022, the on-policy repository's ``train_mpe.sh``) where baton has
them: 25-step episodes (the env type's default), rollouts of one episode on each of 32 envs (the paper: 128),
discount 0.99, GAE lambda 0.95, a learning rate of 7e-4, 10 epochs of whole-batch updates, clip 0.2, entropy
0.01, gradients clipped at 10, and a LayerNorm over each network's input (``policy.model.feature_norm``, the
paper's feature normalisation; a default of the agents' model).

Per agent over 25 steps (BENCHMARKS.md, "Several agents"): random actions score -29.7, each agent heading for its
nearest landmark -20.3, one landmark each -13.3; seed 0 passes -20.3 at 61k env steps and -11 at 1.14M, and
holds about -10 from 1.3M on. Without the LayerNorm it stayed near -16 at 900k.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="simple_spread_mappo",
    env=dict(collector_env_num=32, evaluator_env_num=32, n_evaluator_episode=32),
    policy=dict(
        learn=dict(batch_size=800, learning_rate=7e-4, entropy_weight=0.01,
                   grad_clip_value=10.0),
        collect=dict(n_sample=800),
        eval=dict(evaluator=dict(eval_freq=250)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="mpe"),
    policy=dict(type="mappo"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
