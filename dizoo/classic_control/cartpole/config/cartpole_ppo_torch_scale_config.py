"""PPO on CartPole with 4,096 batched torch envs in one process: the whole loop (rollout, GAE, minibatch updates)
where the envs are, for a GPU (``policy.cuda=true``): ``python
dizoo/classic_control/cartpole/config/cartpole_ppo_torch_scale_config.py [--seed N] [policy.cuda=true]``.

cartpole_ppo_torch_config.py's algorithm at the scale of Isaac Lab's and PureJaxRL's CartPole: 16 vector steps of
4,096 envs per collect (65,536 transitions), 4 epochs of 4 minibatches of 16,384, an evaluation after each collect.
No step or minibatch reads anything back from the device (tests/policies/test_host_sync.py). On one CPU thread
(2026-11-28, the 2-core development machine) it reaches the stop value on seeds 0, 1 and 2 in 17.4, 8.7 and 9.7 s
of training at 90,000-105,000 env steps/s, the evaluations included (``OMP_NUM_THREADS=1 python bench/device_env.py
--scale``; BENCHMARKS.md); the GPU figure is
``python bench/device_env.py --device cuda --scale`` on a device machine.
"""
import copy

from easydict import EasyDict

from dizoo.classic_control.cartpole.config import cartpole_ppo_torch_config as base

main_config = EasyDict(dict(
    exp_name="cartpole_ppo_torch_scale",
    env=dict(collector_env_num=4096),
    policy=dict(
        discount_factor=0.98,
        learn=dict(batch_size=16384, learning_rate=0.002, epoch_per_collect=4),
        collect=dict(n_sample=65536, gae_lambda=0.8),
        eval=dict(evaluator=dict(eval_freq=16)),
    ),
))
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
