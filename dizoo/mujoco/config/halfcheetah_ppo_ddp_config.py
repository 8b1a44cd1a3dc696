"""PPO on HalfCheetah-v5, data-parallel with DDP::

    baton train -c dizoo/mujoco/config/halfcheetah_ppo_ddp_config.py --nproc 2
    torchrun --nproc_per_node=2 dizoo/mujoco/config/halfcheetah_ppo_ddp_config.py

Keeps the single-process data per update: halfcheetah_ppo_config.py (CleanRL's settings) split over 2 ranks. Each
rank steps its env for 1,024 steps per collect and runs the 10 epochs over them in minibatches of 32; DDP
averages the gradients (advantages normalised over both ranks' minibatches), so each update sees a global
minibatch of 64 and each collect is 2,048 transitions, as in one process. The observation and return
statistics are merged across the ranks once per iteration (``policy.obs_norm``, ``policy.reward_norm``), so both
normalise alike. With more ranks,
divide ``n_sample`` and ``batch_size`` by the world size to keep those figures.
"""
import copy

from dizoo.mujoco.config import halfcheetah_ppo_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "halfcheetah_ppo_ddp"
main_config.policy.multi_gpu = True
main_config.policy.collect = dict(n_sample=1024)  # per rank: half the default 2,048
main_config.policy.learn = dict(batch_size=32)  # per rank: half the default 64
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
