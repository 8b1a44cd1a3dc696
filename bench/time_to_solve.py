"""Time to solve (the config's ``env.stop_value``), one fresh process per seed.

Run: ``python bench/time_to_solve.py [--config dizoo/.../x_config.py] [--seeds 0 1 2]`` (default: CartPole
DQN). For each seed it runs the dizoo config as a user does (``python <config> --seed S``) and reports:

- training time: ``summary.json``'s ``wall_time_s``, from the start of the first iteration to the stop;
- process time: the whole command, interpreter start and imports included;
- learner updates per second of training time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")


def run(config: str, seed: int, workdir: str, max_env_step: int) -> dict:
    exp = os.path.join(workdir, f"seed{seed}")
    start = time.perf_counter()
    subprocess.run([sys.executable, config, "--seed", str(seed), "--exp-name", exp, "--no-progress",
                    "--max-env-step", str(max_env_step)], check=True, capture_output=True, cwd=workdir)
    process = time.perf_counter() - start
    with open(os.path.join(exp, "summary.json")) as f:
        summary = json.load(f)
    return dict(seed=seed, solved=summary["stop_reason"] == "stop_value", train_s=summary["wall_time_s"],
                process_s=process, env_step=summary["env_step"], train_iter=summary["train_iter"],
                eval_return=summary["eval_return"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-env-step", type=int, default=200_000)
    args = parser.parse_args()
    print(f"config: {os.path.relpath(args.config, ROOT)}")
    with tempfile.TemporaryDirectory() as workdir:
        rows = [run(os.path.abspath(args.config), seed, workdir, args.max_env_step) for seed in args.seeds]
    for r in rows:
        print(f"seed {r['seed']}: solved={r['solved']} train {r['train_s']:.2f} s, process {r['process_s']:.2f} s, "
              f"{r['env_step']} env steps, {r['train_iter']} updates ({r['train_iter'] / r['train_s']:.0f}/s), "
              f"eval {r['eval_return']:.1f}")
    print(f"median training time to solve: {statistics.median(r['train_s'] for r in rows):.2f} s")
    print(f"median whole-process time:     {statistics.median(r['process_s'] for r in rows):.2f} s")


if __name__ == "__main__":
    main()
