"""DDP on CartPole DQN: 1 process against 2 gloo processes (torchrun), side by side in one run.

Run: ``python bench/ddp_cartpole.py [--budget 20000] [--seeds 0 1 2]``.

1. Throughput at a fixed budget (stop value out of reach): env steps/s and learner updates/s for the whole
   job, and the share of the wall time the ddp middleware spends in its own collectives (one allreduce
   per iteration; the gradient allreduce inside DDP's backward is not counted there).
2. Sample efficiency: env steps each rank collects until the evaluation mean reaches 195, against the env
   steps a 1-process run needs, per seed.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_ddp_config.py")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


UNSOLVABLE = """import runpy
ns = runpy.run_path({config!r}, run_name="config")
main_config, create_config = ns["main_config"], ns["create_config"]
main_config.env.stop_value = 1e9
if __name__ == "__main__":
    from commands import cli_main
    cli_main((main_config, create_config))
"""


def run(nprocs: int, exp: str, seed: int, extra: list, config: str = CONFIG) -> dict:
    args = [config, "--seed", str(seed), "--exp-name", exp, "--no-progress"] + extra
    if nprocs == 1:
        cmd = [sys.executable] + args
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nprocs}",
               f"--master_port={_port()}"] + args
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.dirname(exp))
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    with open(os.path.join(exp, "summary.json")) as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=int, default=20000, help="global env steps of the throughput runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        unsolvable = os.path.join(tmp, "unsolvable_config.py")
        with open(unsolvable, "w") as f:
            f.write(UNSOLVABLE.format(config=CONFIG))
        print(f"throughput, {args.budget} global env steps, stop value out of reach:")
        for n in (1, 2):
            s = run(n, os.path.join(tmp, f"tp{n}"), 0, ["--max-env-step", str(args.budget)], config=unsolvable)
            wall = s["wall_time_s"]
            share = s.get("ddp_collective_s", 0.0) / wall if n > 1 else 0.0
            print(f"  {n} process(es): {s['env_step'] / wall:8.0f} env steps/s, {s['train_iter'] / wall:7.0f} "
                  f"updates/s (per rank), stop: {s['stop_reason']}, ddp collectives {100 * share:.1f}% of wall time")
        print("env steps to an evaluation mean of 195:")
        single, per_rank = [], []
        for seed in args.seeds:
            s1 = run(1, os.path.join(tmp, f"s1_{seed}"), seed, ["--max-env-step", "200000"])
            s2 = run(2, os.path.join(tmp, f"s2_{seed}"), seed, ["--max-env-step", "200000"])
            single.append(s1["env_step"])
            per_rank.append(s2["env_step"] / 2)
            print(f"  seed {seed}: 1 process {s1['env_step']} ({s1['stop_reason']}, {s1['wall_time_s']:.2f} s); "
                  f"2 processes {s2['env_step']} global = {s2['env_step'] // 2} per rank "
                  f"({s2['stop_reason']}, {s2['wall_time_s']:.2f} s)")
        print(f"  median: 1 process {statistics.median(single):.0f}, 2 processes {statistics.median(per_rank):.0f} per rank")


if __name__ == "__main__":
    main()
