"""VDN on MPE Simple Spread (3 agents): ``python dizoo/pettingzoo/config/simple_spread_vdn_config.py
--max-env-step 200000`` (the task has no threshold: give a budget).

The algorithm's defaults (``policies.qmix``: EPyMARL's settings where they carry over from its episodes to
transitions): epsilon from 1 to 0.05 over 100k env steps, each agent drawing its own; 4 updates of 256
transitions after each collect of 64 env rows; Adam at 5e-4; the target network every 200 updates; the squared
TD error with gradients clipped at 10. QMIX and the independent learners take the same defaults: ``baton train
--algo qmix --env simple_spread_v3`` (or ``--algo iql``); VDN ends a little ahead of QMIX here, both ahead of the
independent learners (BENCHMARKS.md).

The evaluation plays 32 episodes (the per-agent return of 25 steps varies by several units between episodes).
Measured against independent learners and QMIX over 3 seeds at 200k env steps: BENCHMARKS.md, "Several agents".
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="simple_spread_vdn",
    env=dict(evaluator_env_num=32, n_evaluator_episode=32),
    policy=dict(eval=dict(evaluator=dict(eval_freq=1000))),
))
create_config = EasyDict(dict(
    env=dict(type="mpe"),
    policy=dict(type="vdn"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
