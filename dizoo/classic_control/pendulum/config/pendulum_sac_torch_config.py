"""SAC on Pendulum as batched torch envs (``pendulum_torch``; docs/performance.md):
``python dizoo/classic_control/pendulum/config/pendulum_sac_torch_config.py [--seed N]``.

pendulum_sac_config.py's settings, with the replay buffer on the learner's device
(``replay_buffer.device="learn"``): with ``policy.cuda=True`` the envs, the transitions and the replay all stay
on the GPU.
"""
import copy

from dizoo.classic_control.pendulum.config import pendulum_sac_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "pendulum_sac_torch"
main_config.policy.other.replay_buffer.device = "learn"
create_config = copy.deepcopy(base.create_config)
create_config.env = dict(type="pendulum_torch", import_names=["dizoo.classic_control.pendulum.envs"])

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
