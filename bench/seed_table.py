"""Many seeds of several tasks at once on one machine, and one table of their scores (issue 33, item 4).

Each (task, seed) is an ordinary ``baton train`` run in its own process, ``--jobs`` of them at a time, each
with one torch thread (``OMP_NUM_THREADS=1``: K processes on K cores, not K x K threads), all sharing the GPU
where the task's overrides put them there. The runs land in ``ROOT/<task>_seed<N>`` and the table is
``baton report``'s (``commands.report``: the interquartile mean of the final evaluations over the seeds, with
its 95% stratified-bootstrap interval), plus each task's mean wall time and how many runs reached their budget
(or their stop value) before the deadline. It is written to ``ROOT/table.txt`` and ``ROOT/table.json``.

``--deadline-s`` bounds the whole table (one call of the device machine is 10 minutes): a run still going then
is stopped as a preemption stops it (SIGTERM: it saves a checkpoint and its evaluations so far count, its score
the last one), and the table says so; a run stopped before its first evaluation has no score and is named.

Plans (``--plan``):

- ``device``: the issue's table for a GPU machine with 16 cores: HalfCheetah SAC and TD3 over 5 seeds with the
  whole update in one CUDA graph (``policy.compile=cudagraph_update``), and Pong PPO over 3 seeds to its stop
  value (18), within the deadline;
- ``cpu``: CartPole DQN and PPO over 3 seeds at the budgets of BENCHMARKS.md's score tables;
- ``per_collect``: Hopper TD3 on CPU over 8 seeds at 20,000 env steps, one env step then one update an iteration
  against 8 and 8 (the same update-to-data ratio, the host's per-iteration costs shared by 8 env steps);
- ``smoke``: two CartPole tasks over 2 seeds at a few hundred steps (what the test runs).

Run: ``python bench/seed_table.py --plan device [--root DIR] [--jobs K] [--deadline-s 540]``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Dict, List, Optional, Sequence, Tuple

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT_DIR)

from commands.report import ReportError, format_report, report_runs, run_score  # noqa: E402

#: the replay and the update on the GPU, captured in one CUDA graph
_CAPTURED = ("policy.cuda=true", "policy.compile=cudagraph_update", "policy.other.replay_buffer.device=learn")


@dataclass(frozen=True)
class Task:
    """A config trained over ``seeds`` seeds (0 .. seeds-1) for ``max_env_step`` env steps, with overrides."""

    name: str
    config: str
    max_env_step: int
    seeds: int
    overrides: Tuple[str, ...] = ()


PLANS: Dict[str, Tuple[Task, ...]] = {
    "device": (
        Task("halfcheetah_sac", "dizoo/mujoco/config/halfcheetah_sac_config.py", 1_000_000, 5,
             _CAPTURED + ("env.stop_value=none",)),
        Task("halfcheetah_td3", "dizoo/mujoco/config/halfcheetah_td3_config.py", 1_000_000, 5,
             _CAPTURED + ("env.stop_value=none",)),
        Task("pong_ppo", "dizoo/atari/config/serial/pong/pong_ppo_config.py", 10_000_000, 3, ("policy.cuda=true",)),
    ),
    "cpu": (
        Task("cartpole_dqn", "dizoo/classic_control/cartpole/config/cartpole_dqn_config.py", 50_000, 3,
             ("env.stop_value=none",)),
        Task("cartpole_ppo", "dizoo/classic_control/cartpole/config/cartpole_ppo_config.py", 100_000, 3,
             ("env.stop_value=none",)),
    ),
    # one env, one update per env step: 8 env steps then 8 updates an iteration (what shares the host's per-iteration
    # costs, bench/offpolicy_host.py) against one and one, scored alike; Hopper TD3 as the suite's learning test
    # trains it (64x64 networks, batches of 128, 5,000 random steps), to 20,000 env steps
    "per_collect": tuple(
        Task(f"hopper_td3_per_collect_{k}", "dizoo/mujoco/config/hopper_td3_config.py", 20_000, 8,
             ("env.stop_value=none", "policy.random_collect_size=5000", "policy.eval.evaluator.eval_freq=1000",
              "policy.model.actor_head_hidden_size_list=[64,64]", "policy.model.critic_head_hidden_size_list=[64,64]",
              "policy.learn.batch_size=128", f"policy.collect.n_sample={k}", f"policy.learn.update_per_collect={k}"))
        for k in (1, 8)),
    "smoke": (
        Task("cartpole_dqn", "dizoo/classic_control/cartpole/config/cartpole_dqn_config.py", 400, 2,
             ("env.stop_value=none", "policy.eval.evaluator.eval_freq=50", "env.n_evaluator_episode=2")),
        Task("cartpole_ppo", "dizoo/classic_control/cartpole/config/cartpole_ppo_config.py", 512, 2,
             ("env.stop_value=none", "env.n_evaluator_episode=2")),
    ),
}


@dataclass
class Job:
    task: Task
    seed: int
    run_dir: str
    process: Optional[subprocess.Popen] = None
    log: Optional[IO[str]] = None
    started: float = 0.0
    wall_s: float = 0.0
    stopped: bool = False   # stopped at the deadline
    returncode: Optional[int] = None

    @property
    def failed(self) -> bool:
        """It ran and ended otherwise than by finishing or by the deadline's SIGTERM (143; -15 before the run
        set its handler)."""
        ok = (0, 143, -signal.SIGTERM) if self.stopped else (0,)
        return self.returncode is not None and self.returncode not in ok


def command(job: Job) -> List[str]:
    return [sys.executable, "-m", "commands", "train", "-c", job.task.config, "--seed", str(job.seed),
            "--max-env-step", str(job.task.max_env_step), "--exp-name", job.run_dir, "--no-progress", "--force",
            *job.task.overrides]


def run_jobs(jobs: Sequence[Job], parallel: int, deadline_s: float, grace_s: float = 25.0) -> None:
    """Run ``jobs``, ``parallel`` at a time; at ``deadline_s`` stop the running ones (SIGTERM: a checkpoint
    and an exit, as a preemption; killed ``grace_s`` later) and never start the rest. However this ends (an
    error, Ctrl-C), no run is left behind."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TORCHINDUCTOR_COMPILE_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT_DIR, os.environ.get("PYTHONPATH")) if p))
    waiting, running = list(jobs), []
    start = time.monotonic()
    try:
        while waiting or running:
            late = time.monotonic() - start >= deadline_s
            while waiting and len(running) < parallel and not late:
                running.append(_start(waiting.pop(0), env))
            if late:
                waiting.clear()
                for job in running:
                    if not job.stopped and job.process.poll() is None:
                        job.stopped = True
                        job.process.send_signal(signal.SIGTERM)
            for job in list(running):
                code = job.process.poll()
                if code is None and job.stopped and time.monotonic() - start > deadline_s + grace_s:
                    job.process.kill()
                    code = job.process.wait()
                if code is not None:
                    _reap(job, code)
                    running.remove(job)
            time.sleep(0.2)
    finally:
        for job in running:  # only after an error: stop what still runs, as the deadline would
            if job.process.poll() is None:
                job.stopped = True
                job.process.send_signal(signal.SIGTERM)
        for job in running:
            try:
                code = job.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                job.process.kill()
                code = job.process.wait()
            _reap(job, code)


def _start(job: Job, env: Dict[str, str]) -> Job:
    shutil.rmtree(job.run_dir, ignore_errors=True)  # no earlier table's run is scored as this one
    os.makedirs(os.path.dirname(job.run_dir), exist_ok=True)
    job.log = open(job.run_dir + ".log", "w")
    job.process = subprocess.Popen(command(job), cwd=ROOT_DIR, env=env, stdout=job.log, stderr=subprocess.STDOUT)
    job.started = time.monotonic()
    return job


def _reap(job: Job, code: int) -> None:
    job.returncode, job.wall_s = code, time.monotonic() - job.started
    if job.log is not None:
        job.log.close()


def table(jobs: Sequence[Job]) -> Tuple[str, List[Dict[str, object]]]:
    """``baton report``'s rows over the runs that ended well and have a score, with each task's mean wall time
    and runs stopped at the deadline; then each run without a score or that failed, named with its log."""
    scored, left_out = [], []
    for job in jobs:
        if job.process is None:
            left_out.append(f"{job.task.name} seed {job.seed}: not started before the deadline")
        elif job.failed:
            left_out.append(f"{job.task.name} seed {job.seed}: failed (exit {job.returncode}), see {job.run_dir}.log")
        else:
            try:
                run_score(job.run_dir, "final")
                scored.append(job)
            except (ReportError, OSError):
                left_out.append(f"{job.task.name} seed {job.seed}: no evaluation before it ended "
                                f"({'stopped at the deadline' if job.stopped else f'exit {job.returncode}'}), "
                                f"see {job.run_dir}.log")
    rows = report_runs([job.run_dir for job in scored], "final") if scored else []
    for row in rows:
        mine = [job for job in scored if job.task.name == row["label"]]
        row["wall_s_mean"] = sum(job.wall_s for job in mine) / len(mine)
        row["stopped_at_deadline"] = sum(job.stopped for job in mine)
    lines = [format_report(rows)] if rows else []
    lines += [f"{row['label']}: mean wall {row['wall_s_mean']:.0f} s; {row['stopped_at_deadline']} of the "
              f"{row['seeds']} scored runs stopped at the deadline (scored by their last evaluation)" for row in rows]
    lines += [f"left out: {line}" for line in left_out]
    return "\n".join(lines), rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", choices=sorted(PLANS), default="cpu")
    parser.add_argument("--root", default="seed_table", help="where the runs and the table go")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                        help="runs at a time (default: the cores this process may use)")
    parser.add_argument("--deadline-s", type=float, default=540.0, help="stop every run still going after this")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    jobs = [Job(task, seed, os.path.join(root, f"{task.name}_seed{seed}"))
            for task in PLANS[args.plan] for seed in range(task.seeds)]
    print(f"seed table '{args.plan}': {len(jobs)} runs, {args.jobs} at a time, deadline {args.deadline_s:g} s; "
          f"runs in {root}", flush=True)
    started = time.monotonic()
    run_jobs(jobs, max(1, args.jobs), args.deadline_s)
    text, rows = table(jobs)
    text += f"\nall runs: {time.monotonic() - started:.0f} s"
    print(text)
    with open(os.path.join(root, "table.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(root, "table.json"), "w") as f:
        json.dump(rows, f, indent=1, default=str)
    return 0 if rows and not any(job.failed or job.process is None for job in jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
