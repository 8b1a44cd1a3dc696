"""DQN on CartPole as batched torch envs (``cartpole_torch``; docs/performance.md):
``python dizoo/classic_control/cartpole/config/cartpole_dqn_torch_config.py [--seed N]``.

cartpole_dqn_config.py's settings, with the replay buffer on the learner's device
(``replay_buffer.device="learn"``): with ``policy.cuda=True`` the envs, the n-step transitions and the replay
all stay on the GPU, and nothing crosses to the host between an env step and an update.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_dqn_torch",
    env=dict(collector_env_num=8),
    policy=dict(
        model=dict(encoder_hidden_size_list=[64, 64]),
        nstep=3,
        learn=dict(
            update_per_collect=8,
            learning_rate=0.002,
            td_loss="mse",
        ),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=50)),
        other=dict(
            eps=dict(type="linear", start=1.0, decay=4000),
            replay_buffer=dict(replay_buffer_size=20000, device="learn"),
        ),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole_torch", import_names=["dizoo.classic_control.cartpole.envs"]),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
