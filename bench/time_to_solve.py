"""Time to solve (the config's ``env.stop_value``), one fresh process per seed.

Run: ``python bench/time_to_solve.py [--config dizoo/.../x_config.py ...] [--seeds 0 1 2]`` (default: CartPole
DQN). For each config and seed it runs the dizoo config as a user does (``python <config> --seed S``) and
reports:

- training time: ``summary.json``'s ``wall_time_s``, from the start of the first iteration to the stop;
- process time: the whole command, interpreter start and imports included;
- env steps to the stop, learner updates per second of training time, the stopping and the best
  evaluation return (a run that hit ``--max-env-step`` first shows how far it got).

The scores of BENCHMARKS.md ("Scores") come from, one config at a time::

    python bench/time_to_solve.py --config dizoo/box2d/lunarlander/config/lunarlander_dqn_config.py --max-env-step 500000
    python bench/time_to_solve.py --config dizoo/box2d/lunarlander/config/lunarlander_ppo_config.py --max-env-step 2000000
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
    exp = os.path.join(workdir, f"{os.path.basename(config)[:-len('_config.py')]}_seed{seed}")
    start = time.perf_counter()
    subprocess.run([sys.executable, config, "--seed", str(seed), "--exp-name", exp, "--no-progress",
                    "--max-env-step", str(max_env_step)], check=True, capture_output=True, cwd=workdir)
    process = time.perf_counter() - start
    with open(os.path.join(exp, "summary.json")) as f:
        summary = json.load(f)
    return dict(seed=seed, solved=summary["stop_reason"] == "stop_value", train_s=summary["wall_time_s"],
                process_s=process, env_step=summary["env_step"], train_iter=summary["train_iter"],
                eval_return=summary["eval_return"], best_eval_return=summary["best_eval_return"])


def _score(value) -> str:
    return "none" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", nargs="+", default=[CONFIG])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-env-step", type=int, default=200_000)
    parser.add_argument("--keep", metavar="DIR", help="write the runs under DIR (for baton plot) instead of a "
                                                      "temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = os.path.abspath(args.keep) if args.keep else tmp
        os.makedirs(workdir, exist_ok=True)
        for config in args.config:
            print(f"config: {os.path.relpath(os.path.abspath(config), ROOT)}", flush=True)
            rows = []
            for seed in args.seeds:  # one at a time: each run has the machine to itself
                r = run(os.path.abspath(config), seed, workdir, args.max_env_step)
                rows.append(r)
                print(f"seed {r['seed']}: solved={r['solved']} train {r['train_s']:.2f} s, process "
                      f"{r['process_s']:.2f} s, {r['env_step']} env steps, {r['train_iter']} updates "
                      f"({r['train_iter'] / r['train_s']:.0f}/s), eval {_score(r['eval_return'])} "
                      f"(best {_score(r['best_eval_return'])})", flush=True)
            print(f"median training time to solve: {statistics.median(r['train_s'] for r in rows):.2f} s")
            print(f"median whole-process time:     {statistics.median(r['process_s'] for r in rows):.2f} s")
            print(f"median env steps:              {statistics.median(r['env_step'] for r in rows):.0f}"
                  f"{'' if all(r['solved'] for r in rows) else ' (not every seed solved)'}", flush=True)


if __name__ == "__main__":
    main()
