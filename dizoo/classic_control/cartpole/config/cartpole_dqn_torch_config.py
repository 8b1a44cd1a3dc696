"""DQN on CartPole as batched torch envs (``cartpole_torch``; docs/performance.md):
``python dizoo/classic_control/cartpole/config/cartpole_dqn_torch_config.py [--seed N]``.

cartpole_dqn_config.py's settings, with the replay buffer on the learner's device
(``replay_buffer.device="learn"``): with ``policy.cuda=True`` the envs, the n-step transitions and the replay
all stay on the GPU, and nothing crosses to the host between an env step and an update.
"""
import copy

from dizoo.classic_control.cartpole.config import cartpole_dqn_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "cartpole_dqn_torch"
main_config.env.collector_env_num = 8
main_config.policy.other.replay_buffer = dict(device="learn")
create_config = copy.deepcopy(base.create_config)
create_config.env = dict(type="cartpole_torch", import_names=["dizoo.classic_control.cartpole.envs"])

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
