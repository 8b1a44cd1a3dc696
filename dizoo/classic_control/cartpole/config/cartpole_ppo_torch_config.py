"""PPO on CartPole as batched torch envs (``cartpole_torch``: CartPole-v1's dynamics as tensors on a device;
docs/performance.md): ``python dizoo/classic_control/cartpole/config/cartpole_ppo_torch_config.py [--seed N]``.

cartpole_ppo_config.py's algorithm on 16 envs instead of 8 (env steps cost nothing here: the time is the
policy's forward per vector step and the updates): a collect of 512 transitions is 32 forwards, each update a
minibatch of 256. ``policy.cuda=True`` puts the envs, the rollout and the learner on the GPU together
(``env.device`` None: the envs follow the device the policy collects on).
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_ppo_torch",
    env=dict(collector_env_num=16),
    policy=dict(
        discount_factor=0.98,
        learn=dict(batch_size=256, learning_rate=0.002),
        collect=dict(n_sample=512, gae_lambda=0.8),
        eval=dict(evaluator=dict(eval_freq=20)),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole_torch", import_names=["dizoo.classic_control.cartpole.envs"]),
    policy=dict(type="ppo"),
))

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
