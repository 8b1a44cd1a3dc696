"""Build the reference offline datasets, deterministically from a fixed seed (nothing is downloaded)::

    python dizoo/classic_control/make_datasets.py [--root DIR] [--work DIR] [--seed 0] [--only cartpole]

- ``cartpole/expert-v0``: 100 episodes of a greedy teacher trained to an evaluation mean of 500 (all of them
  return 500, truncated by the time limit);
- ``cartpole/medium-v0``: 300 episodes of the same teacher acting eps-greedily (eps=0.5: returns of about
  100-150 per episode, most of them terminated).

The teacher is the dizoo CartPole PPO config trained to an evaluation mean of 499 over 10 episodes (about
10k env steps). Why not DQN: the dizoo CartPole DQN config, tuned to reach 195 fast, did not reach a
greedy 500 within 80k env steps here (best evaluations 300-400), while PPO does in seconds; acting greedily
(argmax of its logits) it is as much an expert. The teacher is trained first (``--work``/cartpole_teacher,
reused when its checkpoint exists), each dataset is
recorded with ``baton record``'s code (``pipelines.record``), and an existing dataset is left as it is
(``--overwrite`` to record it again). The root is ``--root``, else ``$MINARI_DATASETS_PATH``, else
``~/.minari/datasets``. Each step's figures (training time, dataset returns) are printed.
"""
from __future__ import annotations

import argparse
import copy
import os
import time
from typing import Any, Dict, Optional

from data.offline import DatasetNotFoundError, dataset_root, open_dataset

DATASETS = {
    # name: (teacher, episodes, eps)
    "cartpole/expert-v0": ("cartpole_ppo", 100, 0.0),
    "cartpole/medium-v0": ("cartpole_ppo", 300, 0.5),
}


def train_cartpole_teacher(work: str, seed: int) -> str:
    """A greedy-500 CartPole policy (the dizoo PPO config, stopping at an evaluation mean of 499 over 10
    episodes); returns its best checkpoint."""
    from dizoo.classic_control.cartpole.config.cartpole_ppo_config import create_config, main_config
    from pipelines import serial_pipeline

    exp = os.path.join(work, "cartpole_teacher")
    ckpt = os.path.join(exp, "ckpt", "best.pth.tar")
    if os.path.isfile(ckpt):
        return ckpt
    cfg = copy.deepcopy(main_config)
    cfg.env.stop_value = 499
    cfg.env.n_evaluator_episode = 10
    cfg.log = dict(progress=False)
    start = time.perf_counter()
    summary = serial_pipeline((cfg, copy.deepcopy(create_config)), seed=seed, max_env_step=200_000, exp_name=exp,
                              force=True)
    print(f"trained the CartPole PPO teacher in {time.perf_counter() - start:.1f} s: best evaluation "
          f"{summary['best_eval_return']}, {summary['env_step']} env steps", flush=True)
    return ckpt


def make(root: Optional[str], work: str, seed: int, only: Optional[str] = None, overwrite: bool = False,
         episodes: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """Build every missing dataset (of family ``only``); returns each one's record report (or its stats
    when it existed)."""
    from dizoo.classic_control.cartpole.config.cartpole_ppo_config import create_config, main_config
    from pipelines.record import record_dataset

    reports: Dict[str, Any] = {}
    for name, (teacher, n_episodes, eps) in DATASETS.items():
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
        ckpt = train_cartpole_teacher(work, seed)
        reports[name] = record_dataset((main_config, create_config), ckpt, n_episodes, name, eps=eps, seed=seed,
                                       root=root, overwrite=overwrite)
    for name, report in reports.items():
        print(f"{name}: {report['episodes']} episodes, {report['transitions']} transitions, mean return "
              f"{report['return_mean']:.1f}{' (existed)' if report.get('existed') else ''}", flush=True)
    return reports


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="dataset root (default $MINARI_DATASETS_PATH or ~/.minari/datasets)")
    parser.add_argument("--work", default="offline_teachers", help="where the teacher runs are trained")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="only datasets whose name starts with this (e.g. cartpole)")
    parser.add_argument("--overwrite", action="store_true", help="record existing datasets again")
    args = parser.parse_args(argv)
    print(f"dataset root: {dataset_root(args.root)}", flush=True)
    make(args.root, args.work, args.seed, args.only, args.overwrite)


if __name__ == "__main__":
    main()
