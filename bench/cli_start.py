"""How long the ``baton`` command takes to answer, and to start training (issue 23, item 4).

Three measures, each a fresh ``baton`` process started from here (the console script of this interpreter's
environment, with ``--root``'s tree first on ``PYTHONPATH`` and as the working directory, so the same script
times another checkout, e.g. a ``git worktree`` of an older commit):

1. ``baton --help``: the whole command, start to exit;
2. ``baton train --list-algos``: the same;
3. the README's first command, ``baton train -c dizoo/classic_control/cartpole/config/cartpole_dqn_config.py``,
   from the start of the process to the end of its first training iteration: the run is given
   ``log.print_freq=1``, so the logger stage writes one ``middleware.logger: env_step=...`` line on stderr at
   the end of every iteration (one collect of 64 env steps and its 8 updates), and the clock stops when the
   first such line arrives; the process is then stopped (its run directory is a temporary one).

Beside each wall time, the CPU seconds the process used (user + system, from ``getrusage`` of the children,
or ``/proc/PID/stat`` when the line arrives): on a loaded machine the nearer estimate of the idle wall time,
as these commands run on one thread (``OMP_NUM_THREADS=1``). Each figure is the best of ``--repeats`` (5) rounds, the rounds interleaved (and the checkouts, when
``--root`` is given several times) so that a load that comes and goes touches every measure alike; every
round is printed too. Run::

    python bench/cli_start.py [--repeats 5] [--root CHECKOUT ...] [--skip-train]
    git worktree add /tmp/before HEAD~1 && python bench/cli_start.py --root /tmp/before --root .

``--profile-imports`` also prints the slowest imports of each command (``python -X importtime``).
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join("dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
FIRST_ITERATION = "middleware.logger: env_step="
COMMANDS = {"baton --help": ["--help"], "baton train --list-algos": ["train", "--list-algos"]}


def _baton() -> List[str]:
    """This environment's ``baton`` console script (run by this interpreter), else ``python -m commands``."""
    script = os.path.join(os.path.dirname(sys.executable), "baton")
    return [sys.executable, script] if os.path.isfile(script) else [sys.executable, "-m", "commands"]


def _env(root: str) -> Dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=root + (os.pathsep + path if path else ""), OMP_NUM_THREADS="1")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """User + system seconds of a running process (Linux ``/proc``; nan elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_command(root: str, argv: List[str]) -> Tuple[float, float]:
    """(wall, CPU) seconds from the start of ``baton ARGV`` to its exit (status 0 required)."""
    cpu, start = _children_cpu(), time.perf_counter()
    proc = subprocess.run(_baton() + argv, cwd=root, env=_env(root), capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"baton {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed, _children_cpu() - cpu


def time_first_iteration(root: str) -> Tuple[float, float]:
    """(wall, CPU) seconds from the start of the README's CartPole DQN command to its first logger line (module
    docstring)."""
    tmp = tempfile.mkdtemp(prefix="baton-cli-start-")
    argv = ["train", "-c", CONFIG, "--no-progress", "--exp-name", os.path.join(tmp, "run"), "log.print_freq=1"]
    start = time.perf_counter()
    proc = subprocess.Popen(_baton() + argv, cwd=root, env=_env(root), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        tail: List[str] = []
        for line in proc.stderr:
            if FIRST_ITERATION in line:
                return time.perf_counter() - start, _process_cpu(proc.pid)
            tail = (tail + [line])[-20:]
        raise RuntimeError(f"baton {' '.join(argv)} ended ({proc.wait()}) before its first iteration:\n"
                           + "".join(tail))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def slowest_imports(root: str, argv: List[str], n: int = 8) -> str:
    """The ``n`` imports with the largest cumulative time in one ``python -X importtime`` run of ``baton ARGV``."""
    proc = subprocess.run([sys.executable, "-X", "importtime"] + _baton()[1:] + argv, cwd=root, env=_env(root),
                          capture_output=True, text=True, timeout=300)
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = line[len("import time:"):].split("|")
            rows.append((int(cumulative), name.strip()))
    return "\n".join(f"    {us / 1e6:6.2f} s  {name}" for us, name in sorted(rows, reverse=True)[:n])


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds; each figure is the best of them")
    parser.add_argument("--root", action="append", default=None,
                        help="a checkout to time (default: this one); give it again to compare checkouts")
    parser.add_argument("--skip-train", action="store_true", help="time the two quick commands only")
    parser.add_argument("--profile-imports", action="store_true", help="also print the slowest imports")
    args = parser.parse_args(argv)
    roots = [os.path.abspath(root) for root in args.root or [ROOT]]
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start; best of {args.repeats}")
    measures = dict(COMMANDS)
    if not args.skip_train:
        measures["README CartPole DQN to its first iteration"] = None
    times: Dict[tuple, List[Tuple[float, float]]] = {(root, name): [] for root in roots for name in measures}
    for _ in range(args.repeats):
        for name, command in measures.items():
            for root in roots:
                times[root, name].append(time_first_iteration(root) if command is None
                                         else time_command(root, command))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    print("| checkout | command | best wall (s) | least CPU (s) | each round, wall (s) |")
    print("|---|---|---|---|---|")
    for (root, name), rounds in times.items():
        walls, cpus = zip(*rounds)
        print(f"| {root} | `{name}` | {min(walls):.2f} | {min(cpus):.2f} | {' / '.join(f'{w:.2f}' for w in walls)} |")
    if args.profile_imports:
        for root in roots:
            for name, command in COMMANDS.items():
                print(f"\nslowest imports of `{name}` in {root} (cumulative):\n{slowest_imports(root, command)}")


if __name__ == "__main__":
    main()
