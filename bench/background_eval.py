"""Blocking against background evaluation, side by side, on a config where evaluation is a large share of
the iteration.

Run: ``python bench/background_eval.py [--max-env-step N] [--repeats R] [--episodes E] [--eval-envs K]
[--eval-freq F] [--niceness N]``.
Each round trains CartPole DQN (the dizoo config, seed 0, stop value out of reach, so every run makes the
same env steps and updates) with ``E`` evaluation episodes on ``K`` envs every ``F`` updates (default 50):
once with blocking evaluation, once with ``policy.eval.evaluator.background=True``, and once without
evaluation (the floor: eval_freq beyond the run), in rotating order, in this one process after a warm-up
run. A trained CartPole policy balances for 500 steps, so an evaluation costs up to ``E * 500`` env steps.

Per run: ``summary.json``'s ``wall_time_s`` (first iteration to finish, including the wait for the last
background evaluation), the evaluations made, and from the stage profile (``log.profile``) the seconds of
everything but the evaluator stage ("training"), which shows whether the evaluation thread slows training
down, and how late the background results came in. ``--niceness`` sets the evaluation process's added
niceness (``middleware.eval_worker.NICENESS``, default 10; 0: the trainer's priority). The ratio is
blocking / background wall time, per round and of the medians.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from typing import Any, Dict, List

import middleware.eval_worker
from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
from pipelines import build_pipeline

MODES = ("blocking", "background", "none")


def run(mode: str, max_env_step: int, episodes: int, eval_envs: int, eval_freq: int, exp_name: str) -> Dict[str, Any]:
    """One training run in ``mode``; its wall time, evaluations, training seconds and CPU time."""
    cfg = copy.deepcopy(main_config)
    cfg.env.stop_value = 1e9
    cfg.env.n_evaluator_episode = episodes
    cfg.env.evaluator_env_num = eval_envs
    cfg.log = dict(progress=False, profile=True, tensorboard=False)
    cfg.policy.eval.evaluator.background = mode == "background"
    cfg.policy.eval.evaluator.eval_freq = 10**9 if mode == "none" else eval_freq
    pipeline = build_pipeline((cfg, create_config), seed=0, max_env_step=max_env_step, exp_name=exp_name)
    cpu = time.process_time()
    summary = pipeline.run()
    seconds = summary["profile"]["seconds"]
    return {"wall": summary["wall_time_s"], "cpu": time.process_time() - cpu, "evaluations": summary["evaluations"],
            "train": sum(seconds.values()) - seconds.get("evaluator", 0.0),
            "iterations": summary["profile"]["iterations"], "env_step": summary["env_step"],
            "train_iter": summary["train_iter"], "background_eval": summary.get("background_eval")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-env-step", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=16, help="evaluation episodes (env.n_evaluator_episode)")
    parser.add_argument("--eval-envs", type=int, default=8, help="evaluation envs (env.evaluator_env_num)")
    parser.add_argument("--eval-freq", type=int, default=50, help="updates between evaluations")
    parser.add_argument("--niceness", type=int, default=middleware.eval_worker.NICENESS,
                        help="added niceness of the evaluation process")
    args = parser.parse_args()
    middleware.eval_worker.NICENESS = args.niceness
    results: Dict[str, List[Dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as workdir:
        run("blocking", 1_000, args.episodes, args.eval_envs, args.eval_freq, os.path.join(workdir, "warmup"))
        for i in range(args.repeats):
            order = MODES[i % 3:] + MODES[:i % 3]  # no mode always runs first, on a fresher machine
            for mode in order:
                results[mode].append(run(mode, args.max_env_step, args.episodes, args.eval_envs, args.eval_freq,
                                         os.path.join(workdir, f"r{i}_{mode}")))
    for i in range(args.repeats):
        row = ", ".join(f"{mode} {results[mode][i]['wall']:.2f} s ({results[mode][i]['evaluations']} evals, "
                        f"training {results[mode][i]['train']:.2f} s)" for mode in MODES)
        ratio = results["blocking"][i]["wall"] / results["background"][i]["wall"]
        print(f"round {i}: {row}; blocking / background {ratio:.2f}")
    med = {mode: {key: statistics.median(r[key] for r in results[mode]) for key in ("wall", "cpu", "train",
                                                                                   "evaluations")}
           for mode in MODES}
    print(f"{'mode':<11} {'wall s':>7} {'CPU s':>7} {'training s':>11} {'evaluations':>12}   (medians)")
    for mode in MODES:
        m = med[mode]
        print(f"{mode:<11} {m['wall']:>7.2f} {m['cpu']:>7.2f} {m['train']:>11.2f} {m['evaluations']:>12.0f}")
    print(f"blocking / background wall time: {med['blocking']['wall'] / med['background']['wall']:.2f} "
          f"(medians); evaluation's cost over no evaluation: blocking "
          f"{med['blocking']['wall'] - med['none']['wall']:+.2f} s, background "
          f"{med['background']['wall'] - med['none']['wall']:+.2f} s")
    lag_s = statistics.median(r["background_eval"]["mean_lag_s"] for r in results["background"])
    lag_iters = statistics.median(r["background_eval"]["mean_lag_train_iter"] for r in results["background"])
    print(f"background results came in {lag_s:.2f} s / {lag_iters:.0f} updates after their snapshot (median of the "
          f"runs' means); evaluation process niceness +{args.niceness}")
    last = results["background"][-1]
    print(f"({last['env_step']} env steps, {last['train_iter']} updates, {last['iterations']} iterations a run; "
          f"{args.episodes} evaluation episodes on {args.eval_envs} envs every {args.eval_freq} updates)")


if __name__ == "__main__":
    main()
