"""What starting the ranks costs: ``engine.launch`` forking them from a server that imported torch once
(``forkserver``, the default where the platform has it) against starting each rank as a fresh interpreter
(``spawn``), side by side in one run.

Two measures, each in its own fresh interpreter per start method (so no server is warm at the start):

1. ``launches``: the same process makes ``--launches`` 2-rank jobs whose ranks each do one allreduce (a
   sweep, or a test suite); the first job's wall time, the later jobs' mean, and the CPU seconds the ranks
   used (the fork server's own import is counted too: it is read from /proc before the run ends).
2. ``cli``: ``baton train -c cartpole_dqn_ddp_config.py --nproc 2`` to the stop value, the wall time of the
   whole command from the shell, as a user runs it once (``--rounds`` alternating rounds, the median).

``--load`` keeps one core busy with a spinning process during both measures (the loaded machine of the
issues). Run: ``python bench/launch_start.py [--launches 5] [--rounds 3] [--load]``.
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
CONFIG = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_ddp_config.py")
METHODS = ("spawn", "forkserver")

# a script run in a fresh interpreter (a file: the ranks import its function by name): K launches with
# the start method forced, then one JSON line
LAUNCHES = r"""
import json, os, resource, sys, time
sys.path.insert(0, {root!r})
import engine.launcher as launcher
from engine.distributed import allreduce_data

method = {method!r}
if method == "spawn":
    launcher._start_method = lambda: "spawn"

def one_allreduce():
    allreduce_data(1.0)

def server_cpu():
    from multiprocessing import forkserver
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if not pid:
        return 0.0
    fields = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

if __name__ == "__main__":
    walls = []
    for _ in range({launches}):
        t = time.perf_counter()
        launcher.launch(one_allreduce, nprocs=2, backend="gloo", timeout=60)
        walls.append(time.perf_counter() - t)
    ranks = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({{"walls": walls, "cpu": ranks.ru_utime + ranks.ru_stime + server_cpu()}}))
"""


def measure_launches(method: str, launches: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "launches.py")
        with open(path, "w") as f:
            f.write(LAUNCHES.format(root=ROOT, method=method, launches=launches))
        out = subprocess.run([sys.executable, path], capture_output=True, text=True, cwd=ROOT,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
    if out.returncode != 0:
        raise RuntimeError(f"{method} launches failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_cli(method: str) -> float:
    """One ``baton train --nproc 2`` to the stop value, through a wrapper script that forces the start
    method on the launcher before the CLI runs."""
    wrapper = (f"import sys; sys.path.insert(0, {ROOT!r}); import engine.launcher as l\n"
               + ("l._start_method = lambda: 'spawn'\n" if method == "spawn" else "")
               + "from commands.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "baton_cli.py")
        with open(path, "w") as f:
            f.write(wrapper)
        t = time.perf_counter()
        out = subprocess.run([sys.executable, path, "train", "-c", CONFIG, "--nproc", "2", "--no-progress",
                              "--exp-name", os.path.join(tmp, "run")], capture_output=True, text=True, cwd=tmp)
        wall = time.perf_counter() - t
    if out.returncode != 0:
        raise RuntimeError(f"{method} cli run failed:\n{out.stderr[-3000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--load", action="store_true", help="keep one core busy with a spinning process")
    args = parser.parse_args()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.load else None
    try:
        print(f"machine: {os.cpu_count()} cores; {'one core kept busy' if args.load else 'idle'}")
        print(f"\n{args.launches} 2-rank launches from one process (one allreduce each):")
        print("| start method | first launch (s) | later launches, mean (s) | CPU, ranks + server (s) |")
        print("|---|---|---|---|")
        for method in METHODS:
            r = measure_launches(method, args.launches)
            later = statistics.mean(r["walls"][1:]) if len(r["walls"]) > 1 else float("nan")
            print(f"| {method} | {r['walls'][0]:.2f} | {later:.2f} | {r['cpu']:.1f} |")
        walls = {m: [] for m in METHODS}
        for _ in range(args.rounds):
            for method in METHODS:
                walls[method].append(measure_cli(method))
        print(f"\n`baton train -c cartpole_dqn_ddp_config.py --nproc 2` to the stop value, whole command, "
              f"{args.rounds} alternating rounds:")
        print("| start method | wall (s), each round | median (s) |")
        print("|---|---|---|")
        for method in METHODS:
            rounds = " / ".join(f"{w:.1f}" for w in walls[method])
            print(f"| {method} | {rounds} | {statistics.median(walls[method]):.1f} |")
    finally:
        if spinner is not None:
            spinner.kill()


if __name__ == "__main__":
    main()
