"""Preemption and restarts as a cluster does them, measured (issue 19's targets).

For each launch mode, ``--trials`` runs of the CartPole DQN config (the DDP config for ``nproc`` and
``torchrun``) that would never end by themselves get SIGTERM at a random moment after training began
(``single``: the process; ``nproc``: baton's launcher alone; ``torchrun``: torchrun's agent, which forwards
it). Each trial reports the exit code, the seconds from the signal to the exit and until every process of
the job is gone, whether ``latest`` holds the iteration the run stopped at (no finished work lost), and
whether ``--resume`` continues from there. ``restart`` SIGKILLs rank 1 of a ``torchrun --max-restarts=2
--rdzv-backend=c10d`` job at a random moment and checks that the run finishes in its own directory with its
env-step budget met once.

    python bench/preemption.py [--trials 10] [--modes single nproc torchrun restart]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from middleware.checkpoint import load_checkpoint  # noqa: E402

CONFIGS = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config")
ENDLESS = ["--no-progress", "env.stop_value=none", "--max-env-step", "100000000", "ckpt.latest_every_s=5"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(mode: str, run_dir: str) -> list:
    ddp = os.path.join(CONFIGS, "cartpole_dqn_ddp_config.py")
    if mode == "single":
        return [sys.executable, os.path.join(CONFIGS, "cartpole_dqn_config.py"), "--exp-name", run_dir] + ENDLESS
    if mode == "nproc":
        return [sys.executable, ddp, "--nproc", "2", "--exp-name", run_dir] + ENDLESS
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{_free_port()}", ddp, "--exp-name", run_dir] + ENDLESS


def _rows(run_dir: str) -> list:
    try:
        with open(os.path.join(run_dir, "progress.csv")) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    header = lines[0].split(",") if lines else []
    return [dict(zip(header, line.split(","))) for line in lines[1:]]


def _session_left(session: int) -> list:
    return subprocess.run(["pgrep", "-s", str(session)], capture_output=True, text=True).stdout.split()


def _start(cmd: list, cwd: str) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1", BATON_DDP_TIMEOUT="30"))


def _wait_training(proc: subprocess.Popen, run_dir: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while len(_rows(run_dir)) < 1:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the run did not start training: {proc.stderr.read()[-2000:]}")
        time.sleep(0.2)


def sigterm_trial(mode: str, rng: random.Random) -> dict:
    with tempfile.TemporaryDirectory(prefix="baton-preempt-") as tmp:
        run_dir = os.path.join(tmp, "run")
        proc = _start(_command(mode, run_dir), tmp)
        try:
            _wait_training(proc, run_dir)
            time.sleep(rng.uniform(0.0, 6.0))
            before = _rows(run_dir)[-1]
            sent = time.monotonic()
            os.kill(proc.pid, signal.SIGTERM)
            proc.communicate(timeout=120)
            exited = time.monotonic() - sent
            while _session_left(proc.pid) and time.monotonic() - sent < 120:
                time.sleep(0.1)
            gone = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        summary = json.load(open(os.path.join(run_dir, "summary.json")))
        latest = load_checkpoint(os.path.join(run_dir, "ckpt", "latest.pth.tar"))["ctx"]
        saved_all = latest["env_step"] == summary["env_step"] and latest["env_step"] >= int(before["env_step"])
        # the same run continued for 256 more env steps (a torchrun job's on baton's launcher: the same ranks)
        config = "cartpole_dqn_config.py" if mode == "single" else "cartpole_dqn_ddp_config.py"
        resume = [sys.executable, os.path.join(CONFIGS, config), "--exp-name", run_dir, "--resume", "--no-progress",
                  "env.stop_value=none", "--max-env-step", str(summary["env_step"] + 256)]
        resumed = subprocess.run(resume + ([] if mode == "single" else ["--nproc", "2"]), cwd=tmp,
                                 capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
        after = json.load(open(os.path.join(run_dir, "summary.json")))
        return {"rc": proc.returncode, "exit_s": exited, "gone_s": gone, "stop_reason": summary["stop_reason"],
                "saved_all": saved_all, "resumable": resumed.returncode == 0 and after["env_step"] > summary["env_step"]}


def restart_trial(rng: random.Random, budget: int = 20000) -> dict:
    with tempfile.TemporaryDirectory(prefix="baton-restart-") as tmp:
        run_dir = os.path.join(tmp, "run")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--max-restarts=2",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{_free_port()}",
               os.path.join(CONFIGS, "cartpole_dqn_ddp_config.py"), "--exp-name", run_dir, "--no-progress",
               "env.stop_value=none", "--max-env-step", str(budget), "ckpt.latest_every_s=2"]
        proc = _start(cmd, tmp)
        try:
            _wait_training(proc, run_dir)
            time.sleep(rng.uniform(1.0, 8.0))
            workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
            rank1 = [p for p in workers if "LOCAL_RANK=1\0" in open(f"/proc/{p}/environ").read()]
            if rank1:
                os.kill(int(rank1[0]), signal.SIGKILL)
            proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        summary = json.load(open(os.path.join(run_dir, "summary.json")))
        return {"rc": proc.returncode, "killed": bool(rank1), "env_step": summary["env_step"],
                "budget_met_once": (budget <= summary["env_step"] < budget + 1000
                                    and summary["stop_reason"] == "max_env_step"),
                "own_dir": sorted(os.listdir(tmp)) == ["run"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--modes", nargs="+", default=["single", "nproc", "torchrun", "restart"],
                        choices=["single", "nproc", "torchrun", "restart"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPU cores, {args.trials} trials per mode")
    for mode in args.modes:
        trials = [restart_trial(rng) if mode == "restart" else sigterm_trial(mode, rng) for _ in range(args.trials)]
        if mode == "restart":
            ok = sum(t["rc"] == 0 and t["budget_met_once"] and t["own_dir"] and t["killed"] for t in trials)
            print(f"restart (rank 1 SIGKILLed, torchrun --max-restarts=2, c10d): {ok}/{len(trials)} finished in their "
                  f"own directory with the budget met once; final env steps {[t['env_step'] for t in trials]}")
            continue
        codes = sorted({t["rc"] for t in trials})
        print(f"{mode:8s} SIGTERM: exit codes {codes}; preempted {sum(t['stop_reason'] == 'preempted' for t in trials)}"
              f"/{len(trials)}; latest = the stop {sum(t['saved_all'] for t in trials)}/{len(trials)}; resumable "
              f"{sum(t['resumable'] for t in trials)}/{len(trials)}; exit after the signal median "
              f"{statistics.median(t['exit_s'] for t in trials):.1f} s, max {max(t['exit_s'] for t in trials):.1f} s; "
              f"every process gone max {max(t['gone_s'] for t in trials):.1f} s")


if __name__ == "__main__":
    main()
