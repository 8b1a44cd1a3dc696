"""DQN with hindsight experience replay on 15-bit flipping: ``python dizoo/goal/config/bit_flipping_dqn_her_config.py``.

The HER paper's first task (``dizoo/goal/envs.py``): without relabelling DQN never meets a goal of 15 bits (-15,
every episode cut, at each evaluation to 150k env steps), with ``her.strategy='future'`` and ``k=4`` (the paper's
and SB3's defaults: 80% of a batch relabelled) it does.

The three keys are 0/1 vectors: they are fed to the Q-network as they are (``type='flatten'``, as SB3's
``MultiInputPolicy`` does), not each through an MLP of its own (the default for a vector key), under two layers of
128. Measured on seed 0 (BENCHMARKS.md, "Hindsight experience replay"): the default per-key MLPs with layers of
128, 128 and 64 reached -7.5 at 48k env steps (25 s); flattened keys with 64 x 64 at 29k (11 s), with 128 x 128 at
13k (5 s), with 256 x 256 at 8k (5 s; seed 1: 10k), all ending near -6.5, the optimum for the evaluation's goals.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="bit_flipping_dqn_her",
    env=dict(evaluator_env_num=8, n_evaluator_episode=32),
    policy=dict(
        model=dict(
            encoder_hidden_size_list=[128, 128],
            encoders=dict(observation=dict(type="flatten"), achieved_goal=dict(type="flatten"),
                          desired_goal=dict(type="flatten")),
        ),
        learn=dict(update_per_collect=8, batch_size=128, target_update_freq=200),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=200)),
        other=dict(
            eps=dict(type="linear", start=1.0),
            # the paper's and SB3's defaults: future goals, 4 relabelled per real one; one-step returns (DQN's
            # default nstep, which hindsight replay needs)
            replay_buffer=dict(her=dict(strategy="future")),
        ),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="bit_flipping"),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
