"""Collection overlapped with inference against serial collection: Pong in ale-py's ``AtariVectorEnv`` with
the Nature-CNN policy in the loop, both collectors built as the pipeline builds them
(``pipelines.stages.collector``), measured alternately in one process.

- serial: one vector env of ``--envs`` envs; each vector step is one policy forward, then one env step;
- overlapped (``env.manager.overlap=True``): two groups of ``--envs / 2`` envs; the policy acts on one
  group while the other steps (``data.env_groups``).

Each round measures both (the order alternating between rounds) after a warm-up call each: ``--calls``
collector calls of ``--steps`` vector steps. torch's thread pool is sized as the pipeline sizes it
(``engine.devices.size_torch_threads``: one core left to the envs). Last, the parts: the forward over all
envs (F), two forwards over half the envs (F2: what the overlapped collector computes per vector step), one
env step (E), and the ratio they allow when the envs step on cores the forward leaves free,
``(F + E) / max(F2, E)``.

Run: ``python bench/collector_overlap.py [--policy dqn|ppo] [--envs 8] [--steps 64] [--calls 3] [--repeats 7]``
(needs the atari extra; ``--device cuda`` puts the policy on the GPU).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from data.envs import make_vector_env
from dizoo.atari.envs import ATARI
from engine import OnlineRLContext, compile_config
from engine.devices import size_torch_threads
from pipelines import stages
from policies import DQNPolicy, PPOPolicy


def build(policy_name: str, num_envs: int, steps: int, device: str):
    if policy_name == "dqn":
        from dizoo.atari.config.serial.pong.pong_dqn_config import create_config, main_config
    else:
        from dizoo.atari.config.serial.pong.pong_ppo_config import create_config, main_config
    cfg = compile_config(main_config, create_config, save=False)
    cfg.env.collector_env_num = num_envs
    cfg.policy.collect.n_sample = num_envs * steps
    cls = DQNPolicy if policy_name == "dqn" else PPOPolicy
    envs = {mode: make_vector_env(ATARI, cfg.env, num_envs, seed=0, groups=2 if mode == "overlapped" else 1)
            for mode in ("serial", "overlapped")}
    policy = cls(cfg.policy, envs["serial"].single_observation_space, envs["serial"].single_action_space,
                 device=device)
    collectors = {mode: stages.collector(cfg, policy, env, seed=0, on_policy=policy_name == "ppo")
                  for mode, env in envs.items()}
    return collectors, envs, policy, make_vector_env(ATARI, cfg.env, num_envs, seed=0)


def components(policy, env, reps: int = 30):
    """What the overlap can gain, from its parts (ms per vector step): ``F`` the forward over all envs,
    ``F2`` two forwards over half the envs each, ``E`` one env step of all envs."""
    num_envs, half = env.num_envs, env.num_envs // 2
    obs = torch.from_numpy(env.reset(seed=0)[0])  # what the env loop hands the policy: a host tensor
    actions = np.zeros(num_envs, dtype=np.int64)
    forward = policy.collect_mode.forward
    for _ in range(5):
        forward(obs), env.step(actions)

    def ms(fn) -> float:
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) / reps * 1e3

    return (ms(lambda: forward(obs)), ms(lambda: (forward(obs[:half]), forward(obs[half:]))),
            ms(lambda: env.step(actions)))


def env_steps_per_s(collector, ctx: OnlineRLContext, calls: int) -> float:
    before = ctx.env_step
    start = time.perf_counter()
    for _ in range(calls):
        collector(ctx)
    return (ctx.env_step - before) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", choices=("dqn", "ppo"), default="dqn")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=64, help="vector steps per collector call")
    parser.add_argument("--calls", type=int, default=3, help="collector calls per measurement")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    threads = size_torch_threads(0)
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(f"device: {name}; torch threads: {threads}; {args.envs} Pong envs; {args.policy.upper()} (Nature CNN); "
          f"{args.calls} calls x {args.steps} vector steps per measurement")
    collectors, envs, policy, component_env = build(args.policy, args.envs, args.steps, args.device)
    contexts = {mode: OnlineRLContext() for mode in collectors}
    for mode, ctx in contexts.items():
        ctx.collect_kwargs["eps"] = 0.05  # ignored by PPO
        collectors[mode](ctx)  # warm-up: first forward, env resets
    figures = {mode: [] for mode in collectors}
    for r in range(args.repeats):
        order = ("serial", "overlapped") if r % 2 == 0 else ("overlapped", "serial")
        for mode in order:
            figures[mode].append(env_steps_per_s(collectors[mode], contexts[mode], args.calls))
        print(f"round {r}: serial {figures['serial'][-1]:7.0f}  overlapped {figures['overlapped'][-1]:7.0f}  "
              f"ratio {figures['overlapped'][-1] / figures['serial'][-1]:.2f}")
    serial, overlapped = statistics.median(figures["serial"]), statistics.median(figures["overlapped"])
    ratios = [o / s for o, s in zip(figures["overlapped"], figures["serial"])]
    print(f"median env steps/s: serial {serial:.0f}, overlapped {overlapped:.0f}; ratio of medians "
          f"{overlapped / serial:.2f}; per-round ratios {min(ratios):.2f} to {max(ratios):.2f} "
          f"(median {statistics.median(ratios):.2f})")
    f, f2, e = components(policy, component_env)
    print(f"parts, ms per vector step: forward over {args.envs} envs F = {f:.2f}, two forwards over "
          f"{args.envs // 2} F2 = {f2:.2f}, env step E = {e:.2f}; overlapped / serial if the envs stepped on "
          f"cores the forward leaves free: (F + E) / max(F2, E) = {(f + e) / max(f2, e):.2f}")
    for env in list(envs.values()) + [component_env]:
        env.close()


if __name__ == "__main__":
    main()
