"""DQN on CartPole-v1, data-parallel with DDP. Run with a launcher (2 processes on CPU use gloo; GPUs nccl)::

    python -m torch.distributed.launch --nproc_per_node=2 --master_port=29501 dizoo/classic_control/cartpole/config/cartpole_dqn_ddp_config.py
    torchrun --nproc_per_node=2 dizoo/classic_control/cartpole/config/cartpole_dqn_ddp_config.py

Each rank collects ``n_sample`` transitions into its own buffer and updates on its own batches; DDP averages
the gradients, so the global batch is ``batch_size * world_size``. Alone (no launcher) it runs as one
process, with a warning.

The hyperparameters are those of cartpole_dqn_config.py, per rank, except the learning rate: DDP
averages gradients over the ranks' batches, so the global batch doubles with 2 ranks and the rate doubles
with it (the linear scaling rule). With it each rank needs fewer env steps to solve than one process.
"""
from easydict import EasyDict

main_config = EasyDict(dict(
    exp_name="cartpole_dqn_ddp_seed0",
    env=dict(
        collector_env_num=8,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=195,
    ),
    policy=dict(
        cuda=False,
        multi_gpu=True,
        model=dict(
            obs_shape=4,
            action_shape=2,
            encoder_hidden_size_list=[128, 128, 64],
            dueling=True,
        ),
        nstep=3,
        discount_factor=0.99,
        learn=dict(
            update_per_collect=8,
            batch_size=64,
            learning_rate=0.004,  # 2x the 1-process rate: DDP averages over a 2x global batch
            target_update_freq=100,
            td_loss="mse",
        ),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=50)),
        other=dict(
            eps=dict(type="linear", start=1.0, end=0.05, decay=4000),
            replay_buffer=dict(replay_buffer_size=20000),
        ),
    ),
))
create_config = EasyDict(dict(
    env=dict(type="cartpole"),
    env_manager=dict(type="sync"),
    policy=dict(type="dqn"),
))

if __name__ == "__main__":
    from engine.entry import cli_main

    cli_main((main_config, create_config))
