"""SAC on Pendulum as batched torch envs (``pendulum_torch``; docs/performance.md):
``python dizoo/classic_control/pendulum/config/pendulum_sac_torch_config.py [--seed N]``.

pendulum_sac_config.py's settings, with the replay buffer on the learner's device
(``replay_buffer.device="learn"``): with ``policy.cuda=True`` the envs, the transitions and the replay all stay
on the GPU.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="pendulum_sac_torch",
    env=dict(collector_env_num=4),
    policy=dict(
        model=dict(
            actor_head_hidden_size_list=[128, 128],
            critic_head_hidden_size_list=[128, 128],
        ),
        learn=dict(update_per_collect=4, batch_size=128, target_theta=0.02),
        collect=dict(n_sample=4),
        other=dict(replay_buffer=dict(replay_buffer_size=100000, device="learn")),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="pendulum_torch", import_names=["dizoo.classic_control.pendulum.envs"]),
    policy=dict(type="sac"),
))

if __name__ == "__main__":
    from pipelines import cli_main

    cli_main((main_config, create_config))
