"""Collector throughput: 8 CartPole envs with the DQN policy in the loop, against a bare SyncVectorEnv
stepping random actions, measured side by side in one process.

Run: ``python bench/collector_throughput.py [--steps N]``.
"""
from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from engine import OnlineRLContext, compile_config
from data.envs import make_vector_env
from engine.registry import ENV_REGISTRY
from pipelines import stages
from policies import DQNPolicy

NUM_ENVS = 8


def bare_env_steps_per_s(steps: int, sample: str) -> float:
    """``sample="space"``: ``env.action_space.sample()`` (the usual random-action loop);
    ``sample="numpy"``: a numpy RNG, the cheapest possible source of actions (a stricter baseline)."""
    env = gym.make_vec("CartPole-v1", num_envs=NUM_ENVS, vectorization_mode="sync",
                       vector_kwargs=dict(autoreset_mode=AutoresetMode.SAME_STEP))
    env.reset(seed=0)
    env.action_space.seed(0)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(env.action_space.sample() if sample == "space" else rng.integers(0, 2, NUM_ENVS))
    return steps * NUM_ENVS / (time.perf_counter() - start)


def collector_env_steps_per_s(steps: int) -> float:
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

    cfg = compile_config(main_config, create_config, save=False)
    cfg.policy.collect.n_sample = 8 * NUM_ENVS * 16  # 128 vector steps per call
    env = make_vector_env(ENV_REGISTRY.get("cartpole"), cfg.env, NUM_ENVS, seed=0)
    policy = DQNPolicy(cfg.policy, env.single_observation_space, env.single_action_space)
    collector = stages.collector(cfg, policy, env, seed=0, on_policy=False)  # as the pipeline builds it
    ctx = OnlineRLContext()
    # eps = 1: every action is random, as in the bare loop, so episodes last as long and the envs reset
    # as often (an untrained greedy policy ends CartPole episodes twice as fast, and resets cost more
    # than steps). The Q-network forward and the collector's bookkeeping still run in full.
    ctx.collect_kwargs["eps"] = 1.0
    collector(ctx)  # warm-up
    calls = max(1, steps // collector.steps_per_call)
    start = time.perf_counter()
    for _ in range(calls):
        ctx.collect_kwargs["eps"] = 1.0
        collector(ctx)
    return calls * collector.steps_per_call * NUM_ENVS / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=4000, help="vector steps per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    space, numpy_rng, ours = [], [], []
    for _ in range(args.repeats):  # interleaved so all see the same machine state
        space.append(bare_env_steps_per_s(args.steps, "space"))
        numpy_rng.append(bare_env_steps_per_s(args.steps, "numpy"))
        ours.append(collector_env_steps_per_s(args.steps))
    s, n, o = max(space), max(numpy_rng), max(ours)
    print(f"bare SyncVectorEnv, action_space.sample(): {s:10.0f} env steps/s")
    print(f"bare SyncVectorEnv, numpy RNG actions:     {n:10.0f} env steps/s")
    print(f"StepCollector + DQN policy (eps 1.0):      {o:10.0f} env steps/s")
    print(f"ratio to action_space.sample() loop: {o / s:.2f}; to numpy-RNG loop: {o / n:.2f}")


if __name__ == "__main__":
    main()
