"""Batched torch envs (``data.torch_env``) against gymnasium's vector envs, side by side in one process.

1. Env steps/s with random actions, at 1k and 16k envs: the torch CartPole (``cartpole_torch``: one tensor
   of all envs, actions drawn on its device) against gymnasium's ``SyncVectorEnv`` of CartPole-v1 (SAME_STEP
   autoreset, as the collectors use it; actions from a numpy RNG), and, for reference, gymnasium's own
   numpy-vectorized CartPole (``gym.make_vec(..., vectorization_mode="vector_entry_point")``).
2. The pipeline's PPO collector (policy in the loop) at 16 envs (the torch config's) and 1k envs: env
   steps/s on torch envs against gymnasium's ``SyncVectorEnv``.
3. PPO's wall time to an evaluation mean of 195 on CartPole (``time_to_stop_value_s``: training time, without
   the build): on gymnasium envs with cartpole_ppo_config.py, on gymnasium envs with the torch config's
   settings (16 envs; the env is the only difference from the next row), and on torch envs with
   cartpole_ppo_torch_config.py.

4. With ``--scale`` (alone): PPO's whole loop at scale, cartpole_ppo_torch_scale_config.py (4,096 torch envs) to its
   stop value: seconds, and env steps/s over the whole loop (issue 33's >= 1M on a GPU); with ``--compile none
   cudagraph`` each seed once per ``policy.compile`` mode, one after the other (whether compiling pays: a cold
   compile's seconds count in the run's, as a user's first run pays them).

Run (one thread, as BENCHMARKS.md's figures): ``OMP_NUM_THREADS=1 python bench/device_env.py``
(``--device cuda`` steps the torch envs on a GPU; ``--skip-ppo`` for the env rates alone; ``--scale``).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import os
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from dizoo.classic_control.cartpole.torch_env import CartPoleTorch

PPO_RUNS = (  # (label, config module, env type override)
    ("gymnasium, cartpole_ppo_config", "dizoo.classic_control.cartpole.config.cartpole_ppo_config", None),
    ("gymnasium, torch config's settings", "dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config",
     "cartpole"),
    ("torch envs, cartpole_ppo_torch_config", "dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config",
     None),
)


def _rate(num_envs: int, step: Callable[[], None], min_seconds: float,
          sync: Callable[[], None] = lambda: None) -> float:
    """Env steps/s of ``step`` (one vector step of ``num_envs``), timed over at least ``min_seconds`` and 3 steps;
    ``sync`` waits for the device before each clock read (CUDA: what was queued is done, not only launched)."""
    step()  # warm-up
    sync()
    steps, start = 0, time.perf_counter()
    while steps < 3 or time.perf_counter() - start < min_seconds:
        step()
        steps += 1
    sync()
    return steps * num_envs / (time.perf_counter() - start)


def torch_rate(num_envs: int, device: str, min_seconds: float) -> float:
    env = CartPoleTorch(num_envs, device=device)
    env.reset(seed=0)
    generator = torch.Generator(device).manual_seed(0)

    def step() -> None:
        env.step(torch.randint(0, 2, (num_envs,), generator=generator, device=device))

    return _rate(num_envs, step, min_seconds, torch.cuda.synchronize if device.startswith("cuda") else lambda: None)


def gym_rate(num_envs: int, mode: str, min_seconds: float) -> float:
    kwargs = dict(vector_kwargs=dict(autoreset_mode=AutoresetMode.SAME_STEP)) if mode == "sync" else {}
    env = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode=mode, **kwargs)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    try:
        return _rate(num_envs, lambda: env.step(rng.integers(0, 2, num_envs)), min_seconds)
    finally:
        env.close()


def collect_rate(num_envs: int, torch_envs: bool, device: str, min_seconds: float) -> float:
    """Env steps/s of the pipeline's collector with the PPO policy of cartpole_ppo_torch_config.py acting (one
    batched forward per vector step, log-probs and values kept): the one ``StepCollector``, on torch envs or on
    gymnasium's ``SyncVectorEnv`` (``torch_envs=False``)."""
    from data.envs import make_vector_env
    from dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config import create_config, main_config
    from engine import OnlineRLContext, compile_config
    from engine.registry import ENV_REGISTRY
    from pipelines import stages
    from policies import PPOPolicy

    main = copy.deepcopy(main_config)
    main.policy.cuda = device.startswith("cuda")
    create = copy.deepcopy(create_config)
    if not torch_envs:
        create.env = dict(type="cartpole")
    cfg = compile_config(main, create, save=False)
    cfg.policy.collect.n_sample = num_envs * 16  # 16 vector steps per call
    env = make_vector_env(ENV_REGISTRY.get(cfg.env.type), cfg.env, num_envs, seed=0)
    policy = PPOPolicy(cfg.policy, env.single_observation_space, env.single_action_space)
    if torch_envs:
        env.to(policy.collect_mode.device)
    collector = stages.collector(cfg, policy, env, seed=0, on_policy=True)
    ctx = OnlineRLContext()
    try:
        return _rate(num_envs * 16, lambda: collector(ctx), min_seconds)
    finally:
        env.close()


def ppo_time_to_solve(module: str, env_type: str | None, seed: int, workdir: str, device: str) -> Dict[str, float]:
    from pipelines import serial_pipeline

    config = importlib.import_module(module)
    main, create = copy.deepcopy(config.main_config), copy.deepcopy(config.create_config)
    main.log = dict(progress=False, tensorboard=False, csv=False)
    if env_type is not None:
        create.env = dict(type=env_type)
    if device.startswith("cuda"):
        main.policy.cuda = True
    summary = serial_pipeline((main, create), seed=seed, max_env_step=100_000,
                              exp_name=os.path.join(workdir, f"{module.rsplit('.', 1)[1]}_{env_type}_{seed}"))
    return {"seconds": summary.get("time_to_stop_value_s") or float("nan"), "env_step": summary["env_step"],
            "solved": summary.get("stop_reason") == "stop_value"}


SCALE_MODULE = "dizoo.classic_control.cartpole.config.cartpole_ppo_torch_scale_config"


def ppo_at_scale(seed: int, workdir: str, device: str, compile_mode: str = "none") -> Dict[str, float]:
    """cartpole_ppo_torch_scale_config.py (4,096 torch envs) trained to its stop value: the training seconds and
    the whole loop's env steps/s (collect, GAE, updates and evaluations over the run's wall time)."""
    from pipelines import serial_pipeline

    config = importlib.import_module(SCALE_MODULE)
    main, create = copy.deepcopy(config.main_config), copy.deepcopy(config.create_config)
    main.log = dict(progress=False, tensorboard=False, csv=False)
    main.policy.cuda = device.startswith("cuda")
    main.policy.compile = compile_mode
    with _timed_evaluations(device) as evaluations:
        summary = serial_pipeline((main, create), seed=seed, max_env_step=20_000_000,
                                  exp_name=os.path.join(workdir, f"scale_{seed}_{compile_mode}"))
    wall = summary["wall_time_s"]
    return {"seconds": summary.get("time_to_stop_value_s") or float("nan"), "env_step": summary["env_step"],
            "rate": summary["env_step"] / wall, "solved": summary.get("stop_reason") == "stop_value",
            "eval_s": evaluations["seconds"], "evaluations": evaluations["count"],
            "train_rate": summary["env_step"] / max(wall - evaluations["seconds"], 1e-9)}


@contextlib.contextmanager
def _timed_evaluations(device: str) -> Iterator[Dict[str, float]]:
    """The seconds the run spends in its evaluations (``middleware.evaluator.evaluate_episodes``), so that the
    collect+train rate (the issue's >= 1M) can be told from the whole loop's: an evaluation of a solved policy is
    500 steps one after another, each a host read of which episodes ended, where a collect is 16 steps of 4,096
    envs. The device is synchronised before each (the training work it has queued is training's time)."""
    from middleware import evaluator

    spent = {"seconds": 0.0, "count": 0}
    original = evaluator.evaluate_episodes
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def timed(*args: Any, **kwargs: Any) -> Any:
        sync()
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent["seconds"] += time.perf_counter() - start
            spent["count"] += 1

    evaluator.evaluate_episodes = timed
    try:
        yield spent
    finally:
        evaluator.evaluate_episodes = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, nargs="+", default=[1024, 16384])
    parser.add_argument("--device", default="cpu", help="the torch envs' device (default cpu)")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="timing per measurement")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--skip-ppo", action="store_true")
    parser.add_argument("--scale", action="store_true",
                        help="only the whole loop at scale: cartpole_ppo_torch_scale_config.py (4,096 envs) to 475")
    parser.add_argument("--compile", nargs="+", default=["none"], choices=["none", "compile", "cudagraph"],
                        help="with --scale: policy.compile modes, each run on every seed (default none)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, gymnasium {gym.__version__}, {torch.get_num_threads()} torch thread(s), "
          f"torch envs on {args.device}")
    if args.scale:
        print(f"PPO's whole loop at scale (4,096 torch envs on {args.device}) to its stop value; seeds {args.seeds}")
        with tempfile.TemporaryDirectory() as workdir:
            for seed in args.seeds:
                for mode in args.compile:
                    r = ppo_at_scale(seed, workdir, args.device, mode)
                    print(f"  seed {seed}, policy.compile={mode}: {r['seconds']:.1f} s to the stop value at "
                          f"{r['env_step']:,} env steps, {r['rate']:,.0f} env steps/s over the whole loop "
                          f"(solved: {r['solved']}); {r['evaluations']} evaluations took {r['eval_s']:.1f} s, "
                          f"collect+train {r['train_rate']:,.0f} env steps/s", flush=True)
        return
    print(f"{'envs':>6}  {'torch CartPole':>16}  {'gym SyncVectorEnv':>18}  {'gym numpy-vector':>17}  "
          f"{'torch / sync':>12}")
    for num_envs in args.envs:
        t = torch_rate(num_envs, args.device, args.min_seconds)
        s = gym_rate(num_envs, "sync", args.min_seconds)
        v = gym_rate(num_envs, "vector_entry_point", args.min_seconds)
        print(f"{num_envs:>6}  {t:>14,.0f}/s  {s:>16,.0f}/s  {v:>15,.0f}/s  {t / s:>11.0f}x", flush=True)
    print("\nPPO collecting (policy in the loop, as the pipeline builds the collector), env steps/s")
    print(f"{'envs':>6}  {'torch envs':>16}  {'gym SyncVectorEnv':>18}  {'ratio':>6}")
    for num_envs in (16,) + tuple(args.envs[:1]):
        t = collect_rate(num_envs, True, args.device, args.min_seconds)
        s = collect_rate(num_envs, False, args.device, args.min_seconds)
        print(f"{num_envs:>6}  {t:>14,.0f}/s  {s:>16,.0f}/s  {t / s:>5.1f}x", flush=True)
    if args.skip_ppo:
        return
    print(f"\nPPO to an evaluation mean of 195 on CartPole (training seconds; seeds {args.seeds})")
    with tempfile.TemporaryDirectory() as workdir:
        for label, module, env_type in PPO_RUNS:
            runs: List[Dict[str, float]] = [ppo_time_to_solve(module, env_type, seed, workdir, args.device)
                                            for seed in args.seeds]
            seconds = [r["seconds"] for r in runs]
            print(f"  {label:<40} median {statistics.median(seconds):6.1f} s  "
                  f"(each: {', '.join(f'{s:.1f}' for s in seconds)}; env steps: "
                  f"{', '.join(str(r['env_step']) for r in runs)}; solved {sum(r['solved'] for r in runs)}/"
                  f"{len(runs)})", flush=True)


if __name__ == "__main__":
    main()
