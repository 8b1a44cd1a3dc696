"""Time to solve CartPole-v1 with DQN (evaluation mean >= 195), one fresh process per seed.

Run: ``python bench/cartpole_dqn_solve.py [--seeds 0 1 2]``. For each seed it runs the dizoo config as a
user does (``python dizoo/.../cartpole_dqn_config.py --seed S``) and reports:

- training time: ``summary.json``'s ``wall_time_s``, from the start of the first iteration to the stop;
- process time: the whole command, interpreter start and imports included.
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


def run(seed: int, workdir: str) -> dict:
    exp = os.path.join(workdir, f"seed{seed}")
    start = time.perf_counter()
    subprocess.run([sys.executable, CONFIG, "--seed", str(seed), "--exp-name", exp, "--no-progress",
                    "--max-env-step", "200000"], check=True, capture_output=True, cwd=workdir)
    process = time.perf_counter() - start
    with open(os.path.join(exp, "summary.json")) as f:
        summary = json.load(f)
    return dict(seed=seed, solved=summary["stop_reason"] == "stop_value", train_s=summary["wall_time_s"],
                process_s=process, env_step=summary["env_step"], train_iter=summary["train_iter"],
                eval_return=summary["eval_return"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        rows = [run(seed, workdir) for seed in args.seeds]
    for r in rows:
        print(f"seed {r['seed']}: solved={r['solved']} train {r['train_s']:.2f} s, process {r['process_s']:.2f} s, "
              f"{r['env_step']} env steps, {r['train_iter']} updates, eval {r['eval_return']:.1f}")
    print(f"median training time to solve: {statistics.median(r['train_s'] for r in rows):.2f} s")
    print(f"median whole-process time:     {statistics.median(r['process_s'] for r in rows):.2f} s")


if __name__ == "__main__":
    main()
