"""Atari Pong: the bare vector env (sync and async), the collector with the DQN policy in the loop (serial
and overlapped with inference), bytes per stored transition, and learner updates/s, measured side by side in
one run, each after a warm-up.

- bare sync: ale-py's ``AtariVectorEnv`` of ``--envs`` envs stepped whole with random actions;
- bare async: the same envs with ``batch_size = envs / 2``: ``send`` a batch of actions, ``recv`` whichever
  half is ready first (ale-py's asynchronous mode, the emulator's ceiling);
- collector serial: ``StepCollector`` over one vector env, one Nature-CNN forward then one env step;
- collector overlapped (``env.manager.overlap``): two groups of ``envs / 2``; the policy acts on one while the
  other steps (``data.env_groups``).

Run: ``python bench/atari_pong.py [--envs 8] [--steps 300] [--repeats 3] [--compile none|compile|cudagraph]
[--amp none|bf16]`` (needs the atari extra; ``--compile``/``--amp`` set ``policy.compile``/``policy.amp``,
docs/performance.md). The
policy runs on cuda when there is one (``--device`` to choose); on a machine without CUDA it runs on the CPU,
where the Nature-CNN forward, not the emulator, sets the pace. torch's thread pool is sized as the pipeline
sizes it. Figures are the best of ``--repeats`` interleaved rounds.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from dizoo.atari.config.serial.pong.pong_dqn_config import create_config, main_config
from dizoo.atari.envs import ATARI
from engine import OnlineRLContext, compile_config
from engine.devices import size_torch_threads
from data.envs import make_vector_env
from pipelines import stages
from policies import DQNPolicy

WARMUP_STEPS = 20


def bare_sync_steps_per_s(env, steps: int) -> float:
    num_envs = env.num_envs
    rng = np.random.default_rng(0)
    for _ in range(WARMUP_STEPS):
        env.step(rng.integers(0, 6, num_envs))
    start = time.perf_counter()
    for _ in range(steps):
        env.step(rng.integers(0, 6, num_envs))
    return steps * num_envs / (time.perf_counter() - start)


def bare_async_steps_per_s(env, steps: int) -> float:
    """``steps`` is in whole-env-count units, so sync and async step the same number of env steps."""
    batch = env.batch_size
    rng = np.random.default_rng(0)
    recvs = steps * env.num_envs // batch
    for _ in range(WARMUP_STEPS):
        env.send(rng.integers(0, 6, batch))
        env.recv()
    start = time.perf_counter()
    for _ in range(recvs):
        env.send(rng.integers(0, 6, batch))
        env.recv()
    return recvs * batch / (time.perf_counter() - start)


def collector_steps_per_s(collector, ctx: OnlineRLContext) -> float:
    before = ctx.env_step
    start = time.perf_counter()
    collector(ctx)
    return (ctx.env_step - before) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=8, help="Pong envs in the vector env and the collector")
    parser.add_argument("--steps", type=int, default=300, help="vector steps per throughput measurement")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the best is reported")
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", default="none", choices=["none", "compile", "cudagraph"],
                        help="policy.compile for the acting forward and the learner")
    parser.add_argument("--amp", default="none", choices=["none", "bf16"], help="policy.amp")
    args = parser.parse_args()
    num_envs, device = args.envs, args.device
    cfg = compile_config(main_config, create_config, save=False)
    cfg.env.collector_env_num = num_envs
    cfg.policy.collect.n_sample = num_envs * args.steps
    cfg.policy.compile, cfg.policy.amp = args.compile, args.amp
    threads = size_torch_threads(cfg.torch_threads)
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    print(f"device: {name} ({device}); {os.cpu_count()} CPU cores; torch threads {threads}; {num_envs} Pong envs; "
          f"policy.compile={args.compile} policy.amp={args.amp}")

    sync_env = make_vector_env(ATARI, cfg.env, num_envs, seed=0)
    async_cfg = dict(cfg.env, env_kwargs=dict(cfg.env.env_kwargs, batch_size=max(1, num_envs // 2)))
    async_env = make_vector_env(ATARI, async_cfg, num_envs, seed=0)
    for env in (sync_env, async_env):
        env.reset(seed=0)
    serial_env = make_vector_env(ATARI, cfg.env, num_envs, seed=0)
    grouped_env = make_vector_env(ATARI, cfg.env, num_envs, seed=0, groups=2)
    policy = DQNPolicy(cfg.policy, sync_env.single_observation_space, sync_env.single_action_space, device=device)
    collectors = {"serial": stages.collector(cfg, policy, serial_env, seed=0, on_policy=False),
                  "overlapped": stages.collector(cfg, policy, grouped_env, seed=0, on_policy=False)}
    contexts = {mode: OnlineRLContext() for mode in collectors}
    for mode, ctx in contexts.items():
        ctx.collect_kwargs["eps"] = 0.05
        collectors[mode](ctx)  # warm-up: first forwards (cuda context, kernels), resets
    figures = {key: [] for key in ("sync", "async", "serial", "overlapped")}
    for _ in range(args.repeats):
        figures["sync"].append(bare_sync_steps_per_s(sync_env, args.steps))
        figures["async"].append(bare_async_steps_per_s(async_env, args.steps))
        for mode in collectors:
            figures[mode].append(collector_steps_per_s(collectors[mode], contexts[mode]))
    best = {key: max(values) for key, values in figures.items()}
    print(f"bare AtariVectorEnv, sync, random actions:            {best['sync']:8.0f} env steps/s")
    print(f"bare AtariVectorEnv, async (batch {num_envs // 2}), random actions: {best['async']:8.0f} env steps/s")
    for mode in ("serial", "overlapped"):
        print(f"StepCollector {mode:10s} + DQN (Nature CNN, eps 0.05): {best[mode]:8.0f} env steps/s; "
              f"of bare sync {best[mode] / best['sync']:.2f}, of bare async {best[mode] / best['async']:.2f}")
    print(f"overlapped / serial collector: {best['overlapped'] / best['serial']:.2f} (per round: "
          f"{', '.join(f'{o / s:.2f}' for o, s in zip(figures['overlapped'], figures['serial']))})")

    ctx = contexts["serial"]
    buffer = stages.replay_buffer(cfg.policy, seed=0, frame_stack=4, num_envs=num_envs)
    buffer.push(ctx.trajectories)
    per = buffer.storage.bytes_per_transition()
    full = 2 * 4 * 84 * 84
    print(f"replay bytes per transition: {per:.0f} (full obs + next_obs stacks: {full}); "
          f"1M transitions: {per * 1e6 / 2**30:.1f} GiB (full stacks: {full * 1e6 / 2**30:.1f} GiB)")

    batch_size = cfg.policy.learn.batch_size
    for _ in range(3):  # warm-up: the first updates compile, and record the CUDA graphs (policy.compile)
        policy.learn_mode.forward(buffer.sample(batch_size))
    start = time.perf_counter()
    for _ in range(args.updates):
        policy.learn_mode.forward(buffer.sample(batch_size))
    print(f"DQN learner on {device}: {args.updates / (time.perf_counter() - start):.1f} updates/s (batch {batch_size})")
    for env in (sync_env, async_env, serial_env, grouped_env):
        env.close()


if __name__ == "__main__":
    main()
