"""The host's time per env step outside the update, in the one-env off-policy loop (issue 33: SAC/TD3 on a GPU).

On the GPU the update of ``policy.compile=cudagraph_update`` is one graph launch, and an iteration of HalfCheetah
SAC still took 2.0 ms against the GPU's 0.55 ms (BENCHMARKS.md, "The fifth GPU run"): the rest is the host's, in
the stages around the update (the collector's act, env step, chunk, n-step and checks; the pusher's write into the
replay; the logger, the checkpoint's and the termination's checks). Those stages do the same work on a CPU, so
this bench measures them here, where every session can: HalfCheetah-v5 with the config's one env and one update per
env step, but networks of 16 units and batches of 32 so that the update and the acting forward cost little, each
stage's microseconds per env step from ``log.profile`` (``engine.profile``: the loop's own clock) over
``--env-steps`` env steps after ``--warmup`` iterations, and the sum of every stage but the learner's ("outside the
update").

``--per-collect 1,8`` also times collects of 8 env steps followed by 8 updates (``policy.collect.n_sample`` and
``policy.learn.update_per_collect``; still one update per env step, and under ``cudagraph_update`` the 8 updates are
one graph): what a stage costs per call is then shared by 8 env steps.

Each (checkout, algo) runs in a fresh process with ``OMP_NUM_THREADS=1``, ``--rounds`` times, the rounds
interleaved so that a load that comes and goes touches every checkout alike; each stage's figure is the best
round's. Run::

    python bench/offpolicy_host.py [--algos sac,td3] [--per-collect 1,8] [--env-steps 3000] [--rounds 3]
        [--root CHECKOUT ...]
    git worktree add /tmp/before 2ed97da && python bench/offpolicy_host.py --root /tmp/before --root .

(needs the mujoco extra).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: the stages the update's own time is charged to: left out of "outside the update"
UPDATE_STAGES = ("learner",)


def child(algo: str, warmup: int, env_steps: int, per_collect: int) -> Dict[str, float]:
    """One run in this process: microseconds per env step of each stage over the timed iterations
    (``per_collect`` env steps and as many updates an iteration)."""
    import copy
    import importlib
    import tempfile

    import torch

    from pipelines import build_pipeline

    torch.set_num_threads(1)
    module = importlib.import_module(f"dizoo.mujoco.config.halfcheetah_{algo}_config")
    main, create = copy.deepcopy(module.main_config), copy.deepcopy(module.create_config)
    main.policy.model = dict(actor_head_hidden_size_list=[16], critic_head_hidden_size_list=[16])
    main.policy.setdefault("learn", {}).update(batch_size=32, update_per_collect=per_collect)
    main.policy.setdefault("collect", {})["n_sample"] = per_collect
    main.policy.random_collect_size = 50
    main.env.stop_value = float("inf")
    main.policy.setdefault("eval", {}).setdefault("evaluator", {})["eval_freq"] = 10**9
    main.log = dict(progress=False, profile=True)
    with tempfile.TemporaryDirectory(prefix="offpolicy_host_") as out_dir:
        return _timed_run(build_pipeline((main, create), seed=0, max_env_step=10**9, exp_name=out_dir, force=True),
                          warmup, env_steps, per_collect)


def _timed_run(pipeline: Any, warmup: int, env_steps: int, per_collect: int) -> Dict[str, float]:
    """Each stage's microseconds per env step from the ``warmup``-th iteration on, over ``env_steps``."""
    iterations = max(1, env_steps // per_collect)
    marks: Dict[str, Dict[str, float]] = {}
    count = [0]

    def clock(ctx) -> None:
        count[0] += 1
        if count[0] == warmup:
            marks["from"] = pipeline.profile.totals()
        elif count[0] == warmup + iterations:
            marks["to"] = pipeline.profile.totals()
            ctx.finish = True

    pipeline.append(clock, name="clock")
    pipeline.run()
    return {stage: 1e6 * (marks["to"][stage] - marks["from"].get(stage, 0.0)) / (iterations * per_collect)
            for stage in marks["to"] if stage != "clock"}


def run_child(root: str, algo: str, warmup: int, env_steps: int, per_collect: int) -> Dict[str, float]:
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", algo, "--warmup", str(warmup),
                           "--env-steps", str(env_steps), "--per-collect", str(per_collect)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{root} {algo}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", default="sac,td3")
    parser.add_argument("--per-collect", default="1", help="env steps (and updates) per iteration: a list")
    parser.add_argument("--warmup", type=int, default=200, help="iterations before the timed ones")
    parser.add_argument("--env-steps", type=int, default=3000, help="timed env steps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--root", action="append", default=None, help="a checkout to time (repeatable)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.warmup, args.env_steps, int(args.per_collect))))
        return
    roots = [os.path.abspath(root) for root in args.root or [ROOT]]
    columns = [(root, int(k)) for root in roots for k in args.per_collect.split(",")]
    algos = args.algos.split(",")
    rounds: Dict[tuple, List[Dict[str, float]]] = {(column, algo): [] for column in columns for algo in algos}
    for _ in range(args.rounds):
        for algo in algos:
            for column in columns:
                rounds[column, algo].append(run_child(column[0], algo, args.warmup, args.env_steps, column[1]))
    print(f"µs per env step (one update per env step), best of {args.rounds} rounds, {args.env_steps} env steps "
          f"each after {args.warmup} iterations")
    names = [f"{os.path.basename(root) or root}, {k} per collect" for root, k in columns]
    for algo in algos:
        first = rounds[columns[0], algo]
        stages = sorted({s for column in columns for r in rounds[column, algo] for s in r},
                        key=lambda s: -min(r.get(s, 0.0) for r in first))
        print(f"\n{algo}:\n\n| stage | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
        for stage in stages:
            cells = [min(r.get(stage, 0.0) for r in rounds[column, algo]) for column in columns]
            print(f"| {stage} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
        cells = [min(sum(v for s, v in r.items() if s not in UPDATE_STAGES) for r in rounds[column, algo])
                 for column in columns]
        print("| **outside the update** | " + " | ".join(f"**{c:.1f}** ({c / cells[0]:.2f}x)" for c in cells) + " |")


if __name__ == "__main__":
    main()
