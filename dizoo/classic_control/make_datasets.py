"""Build the reference offline datasets, deterministically from a fixed seed (nothing is downloaded)::

    python dizoo/classic_control/make_datasets.py [--root DIR] [--work DIR] [--seed 0] [--only cartpole]

- ``cartpole/expert-v0``: 100 episodes of a greedy teacher trained to an evaluation mean of 500 (all of them
  return 500, truncated by the time limit);
- ``cartpole/medium-v0``: 300 episodes of the same teacher acting eps-greedily (eps=0.5: returns of about
  100-150 per episode, most of them terminated);
- ``pendulum/medium-v0``: 100 episodes of a partly trained SAC (its evaluation -380 over 20 episodes, between
  random, about -1200, and expert, about -150), acting greedily except for eps=0.1 uniformly random actions
  (D4RL's "medium" recipe: a policy stopped early, recorded with some noise): mean return -553, returns from
  -954 to -135.

The CartPole teacher is the dizoo CartPole PPO config trained to an evaluation mean of 499 over 10 episodes
(about 10k env steps). Why not DQN: the dizoo CartPole DQN config, tuned then to reach 195 fast, did not reach a
greedy 500 within 80k env steps here (best evaluations 300-400), while PPO does in seconds; acting greedily
(argmax of its logits) it is as much an expert. The Pendulum teacher is the dizoo Pendulum SAC config
stopped at its first evaluation (20 episodes, every 20 updates) at or above -700 (about 700 updates, a
matter of seconds). Each teacher is trained once per call, in a temporary directory removed at the end:
the datasets are all the script leaves. ``--work DIR`` keeps the teachers' runs in
``DIR/<name>_teacher_seed<seed>`` instead (checkpoints, logs), and a later call with the same ``--work`` and
``--seed`` reuses a teacher whose run there reached its stop value (a run that stopped short, killed or out of
budget, is trained again; its directory is moved aside, not deleted). Each dataset is recorded with ``baton
record``'s code (``commands.record``), and an existing dataset is left as it is (``--overwrite`` to record it
again). The root is ``--root``, else
``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``. Each step's figures (training time, dataset returns)
are printed.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import time
from typing import Any, Dict, Optional

from data.offline import DatasetNotFoundError, dataset_root, open_dataset
from engine.context import StopReason

DATASETS = {
    # name: (teacher, episodes, eps, envs recording side by side)
    "cartpole/expert-v0": ("cartpole_ppo", 100, 0.0, 8),
    "cartpole/medium-v0": ("cartpole_ppo", 300, 0.5, 8),
    "pendulum/medium-v0": ("pendulum_sac", 100, 0.1, 50),  # every episode is 200 steps: 50 envs, 2 rounds
}

#: teacher: (its run directory under --work, the dizoo config it is trained and recorded with, what the
#: training changes in it, the env step budget)
TEACHERS = {
    "cartpole_ppo": ("cartpole_teacher", "dizoo.classic_control.cartpole.config.cartpole_ppo_config",
                     # the teacher the reference datasets were recorded with: 10 epochs (the config's 5 hold 500 in
                     # less time; a teacher need only reach 499 once)
                     {"env.stop_value": 499, "env.n_evaluator_episode": 10, "policy.learn.epoch_per_collect": 10},
                     200_000),
    "pendulum_sac": ("pendulum_teacher", "dizoo.classic_control.pendulum.config.pendulum_sac_config",
                     # 20 episodes every 20 updates: it passes from about -1,000 to better than -400 within 100
                     # updates, and 10 episodes' mean is too noisy a sign of where it is
                     {"env.stop_value": -700, "env.n_evaluator_episode": 20, "env.evaluator_env_num": 20,
                      "policy.eval.evaluator.eval_freq": 20}, 20_000),
}


def _config(teacher: str) -> tuple:
    import importlib

    module = importlib.import_module(TEACHERS[teacher][1])
    return copy.deepcopy(module.main_config), copy.deepcopy(module.create_config)


def teacher_run_dir(teacher: str, work: str, seed: int) -> str:
    """Where ``teacher`` trained with ``seed`` keeps its run under ``work``: one directory per seed, so that
    ``--seed 1`` never records with the teacher of seed 0."""
    return os.path.join(work, f"{TEACHERS[teacher][0]}_seed{seed}")


def finished_teacher(exp: str) -> bool:
    """Whether the run in ``exp`` reached its stop value: its ``summary.json`` says so and its best checkpoint
    is there. A run killed or stopped by its budget has a best checkpoint too, of a teacher short of the bar."""
    try:
        with open(os.path.join(exp, "summary.json")) as f:  # the run's summary (middleware.summary)
            reason = json.load(f).get("stop_reason")
    except (OSError, ValueError):
        return False
    return reason == StopReason.STOP_VALUE and os.path.isfile(os.path.join(exp, "ckpt", "best.pth.tar"))


def train_teacher(teacher: str, work: str, seed: int) -> str:
    """Train ``teacher`` (``TEACHERS``: its dizoo config with the changes listed there) in its run directory
    under ``work`` unless a run there reached its stop value; returns its best checkpoint."""
    from pipelines import serial_pipeline

    _, _, changes, max_env_step = TEACHERS[teacher]
    exp = teacher_run_dir(teacher, work, seed)
    ckpt = os.path.join(exp, "ckpt", "best.pth.tar")
    if finished_teacher(exp):
        return ckpt
    cfg, create = _config(teacher)
    for path, value in changes.items():
        node = cfg
        *parents, last = path.split(".")
        for part in parents:
            if part not in node:
                node[part] = {}
            node = node[part]
        node[last] = value
    cfg.log = dict(progress=False)
    start = time.perf_counter()
    summary = serial_pipeline((cfg, create), seed=seed, max_env_step=max_env_step, exp_name=exp, force=True)
    print(f"trained the {teacher} teacher in {time.perf_counter() - start:.1f} s: best evaluation "
          f"{summary['best_eval_return']:.1f}, {summary['env_step']} env steps, {summary['train_iter']} updates",
          flush=True)
    if summary["stop_reason"] != StopReason.STOP_VALUE:
        print(f"warning: the {teacher} teacher stopped at {summary['stop_reason']} short of its stop value "
              f"{changes.get('env.stop_value')}: its datasets are recorded from its best checkpoint, and a later "
              f"call with this --work trains it again", flush=True)
    return ckpt


def make(root: Optional[str], work: str, seed: int, only: Optional[str] = None, overwrite: bool = False,
         episodes: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """Build every missing dataset (of family ``only``); returns each one's record report (or its stats
    when it existed)."""
    from engine.devices import size_torch_threads
    from commands.record import record_dataset

    size_torch_threads()  # as training does: recording a teacher that exists already acts with this share too
    reports: Dict[str, Any] = {}
    for name, (teacher, n_episodes, eps, num_envs) in DATASETS.items():
        n_episodes = (episodes or {}).get(name, n_episodes)  # tests record smaller ones
        if only and not name.startswith(only):
            continue
        if not overwrite:
            try:
                ds = open_dataset(name, root)
                returns = ds.episode_returns()
                reports[name] = {"episodes": ds.n_episodes, "transitions": ds.total_steps,
                                 "return_mean": float(returns.mean()), "existed": True}
                continue
            except DatasetNotFoundError:
                pass
        ckpt = train_teacher(teacher, work, seed)
        reports[name] = record_dataset(_config(teacher), ckpt, n_episodes, name, eps=eps, seed=seed, root=root,
                                       num_envs=min(num_envs, n_episodes), overwrite=overwrite)
    for name, report in reports.items():
        print(f"{name}: {report['episodes']} episodes, {report['transitions']} transitions, mean return "
              f"{report['return_mean']:.1f}{' (existed)' if report.get('existed') else ''}", flush=True)
    return reports


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="dataset root (default $MINARI_DATASETS_PATH or ~/.minari/datasets)")
    parser.add_argument("--work", default=None, metavar="DIR",
                        help="keep the teachers' runs in DIR (reused by a later call); default: a temporary "
                             "directory, removed at the end")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="only datasets whose name starts with this (cartpole, pendulum)")
    parser.add_argument("--overwrite", action="store_true", help="record existing datasets again")
    args = parser.parse_args(argv)
    print(f"dataset root: {dataset_root(args.root)}", flush=True)
    if args.work is not None:
        make(args.root, args.work, args.seed, args.only, args.overwrite)
        return
    with tempfile.TemporaryDirectory(prefix="baton-teachers-") as work:
        make(args.root, work, args.seed, args.only, args.overwrite)


if __name__ == "__main__":
    main()
