"""Rainbow on Pong, data-parallel with DDP::

    torchrun --nproc_per_node=2 dizoo/atari/config/serial/pong/pong_rainbow_ddp_config.py
    baton train -c dizoo/atari/config/serial/pong/pong_rainbow_ddp_config.py --gpus 2

pong_rainbow_config.py per rank: each update averages the gradients of ``batch_size * world_size``
transitions, at the single-process learning rate. Each rank draws its own noise for its noisy layers (its
generator is seeded ``seed + rank``), so the ranks explore differently and the averaged gradient averages
over noise draws too; ``baton check-ddp`` compares the update with the noise off (policies/noisy.py).
"""
import copy

from dizoo.atari.config.serial.pong import pong_rainbow_config as base

main_config = copy.deepcopy(base.main_config)
main_config.exp_name = "pong_rainbow_ddp"
main_config.policy.multi_gpu = True
create_config = copy.deepcopy(base.create_config)

if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
