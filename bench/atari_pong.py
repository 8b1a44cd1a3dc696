"""Atari Pong: collector throughput with the DQN policy in the loop against the bare vector env, bytes per
stored transition, and learner updates/s, measured side by side in one run.

Run: ``python bench/atari_pong.py [--steps 300]`` (needs the atari extra). On a machine without CUDA the
policy runs on the CPU, where the Nature-CNN forward, not the emulator, sets the pace.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from dizoo.atari.config.serial.pong.pong_dqn_config import create_config, main_config
from dizoo.atari.envs import ATARI
from engine import OnlineRLContext, compile_config
from data.envs import make_vector_env
from pipelines import stages
from policies import DQNPolicy

NUM_ENVS = 8


def bare_steps_per_s(steps: int, cfg) -> float:
    env = make_vector_env(ATARI, cfg.env, NUM_ENVS, seed=0)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(rng.integers(0, 6, NUM_ENVS))
    env.close()
    return steps * NUM_ENVS / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300, help="vector steps per throughput measurement")
    parser.add_argument("--updates", type=int, default=50)
    args = parser.parse_args()
    cfg = compile_config(main_config, create_config, save=False)
    cfg.policy.collect.n_sample = NUM_ENVS * args.steps
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device: {torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu'}, torch threads {torch.get_num_threads()}")

    bare = bare_steps_per_s(args.steps, cfg)
    env = make_vector_env(ATARI, cfg.env, NUM_ENVS, seed=0)
    policy = DQNPolicy(cfg.policy, env.single_observation_space, env.single_action_space, device=device)
    collector = stages.collector(cfg, policy, env, seed=0, on_policy=False)
    ctx = OnlineRLContext()
    ctx.collect_kwargs["eps"] = 0.05
    start = time.perf_counter()
    collector(ctx)
    ours = ctx.env_step / (time.perf_counter() - start)
    print(f"bare AtariVectorEnv (8 Pong envs), random actions: {bare:8.0f} env steps/s")
    print(f"StepCollector + DQN (Nature CNN) on {device}:       {ours:8.0f} env steps/s  ratio {ours / bare:.2f}")

    buffer = stages.replay_buffer(cfg.policy, seed=0, frame_stack=4, num_envs=NUM_ENVS)
    buffer.push(ctx.trajectories)
    per = buffer.storage.bytes_per_transition()
    full = 2 * 4 * 84 * 84
    print(f"replay bytes per transition: {per:.0f} (full obs + next_obs stacks: {full}); "
          f"1M transitions: {per * 1e6 / 2**30:.1f} GiB (full stacks: {full * 1e6 / 2**30:.1f} GiB)")

    batch_size = cfg.policy.learn.batch_size
    policy.learn_mode.forward(buffer.sample(batch_size))
    start = time.perf_counter()
    for _ in range(args.updates):
        policy.learn_mode.forward(buffer.sample(batch_size))
    print(f"DQN learner on {device}: {args.updates / (time.perf_counter() - start):.1f} updates/s (batch {batch_size})")
    env.close()


if __name__ == "__main__":
    main()
