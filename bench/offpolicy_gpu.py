"""SAC and TD3 on HalfCheetah on one GPU, eager against ``policy.compile=cudagraph_update``, side by side.

Issue 33's anchor is LeanRL (torch.compile and CUDA graphs on an H100): SAC 725 and TD3 936 env steps/s at one
update per env step; its goal is >= 1,000 each with the same returns. Each run here trains
``dizoo/mujoco/config/halfcheetah_<algo>_config.py`` (CleanRL's settings: one env, one update of 256 per env
step) on the GPU for ``--seconds`` of wall time, and reports:

- env steps/s while learning, over ``--seconds`` from the 20th update on (the random warm-up's steps, which need
  no update, the start evaluation and the compiles are left out), and updates/s over the same span;
- the seconds from the first update to the 20th (the compiles, the warm-up calls and the capture), which the
  rate leaves out; evaluation runs once, at the start (a short run's returns say nothing yet: the seed table's
  runs, ``bench/seed_table.py``, say where the returns end);
- whether the update was captured (the log's warning names why not).

The random warm-up is at most ``--random-steps`` (5,000: TD3's config has 25,000, which on one env is many
seconds before the first update, and the rate is the update's). A run that has not reached its 20th update
after ``--cap-s`` seconds ends there and says so (0/s: the cap, not the rate).

A mode ``MODE@K`` (``cudagraph_update@8``) collects K env steps and then makes K updates per iteration
(``policy.collect.n_sample`` and ``policy.learn.update_per_collect``: still one update per env step, and under
``cudagraph_update`` the K updates are one graph): what each iteration costs the host beyond its env steps (the
collector's chunk, the push, the graph's launch and checks, the other stages) is shared by K env steps.

Run: ``python bench/offpolicy_gpu.py [--algos sac,td3] [--modes none,cudagraph_update] [--seconds 30]
[--cap-s 120] [--random-steps 5000] [--seed 0]`` (needs the mujoco extra and CUDA; without CUDA it runs on the
CPU, where ``cudagraph_update`` is eager, with a warning).
"""
from __future__ import annotations

import argparse
import copy
import importlib
import os
import tempfile
import time
from typing import Any, Dict, List

import torch


#: the update the rate is timed from: past the compiles, the two warm-up calls and the capture
SETTLED_ITER = 20


def training_run(algo: str, mode: str, seconds: float, seed: int, cuda: bool, cap_s: float = 120.0,
                 random_steps: int = 5000, profile: bool = False) -> Dict[str, float]:
    from pipelines import build_pipeline

    module = importlib.import_module(f"dizoo.mujoco.config.halfcheetah_{algo}_config")
    main, create = copy.deepcopy(module.main_config), copy.deepcopy(module.create_config)
    main.policy.cuda = cuda
    compile_mode, _, per_collect = mode.partition("@")  # MODE@K: K env steps, then K updates, per iteration
    main.policy.compile = compile_mode
    if per_collect:
        main.policy.setdefault("collect", {})["n_sample"] = int(per_collect)
        main.policy.setdefault("learn", {})["update_per_collect"] = int(per_collect)
    main.policy.setdefault("other", {}).setdefault("replay_buffer", {})["device"] = "learn" if cuda else None
    if int(main.policy.get("random_collect_size", 0)) > random_steps:
        main.policy.random_collect_size = random_steps
    main.env.stop_value = float("inf")  # env.stop_value=none: the wall clock ends the run
    # one evaluation, at the start (5 HalfCheetah episodes take seconds): a short run's rate is the update's and
    # the env's, and its returns say nothing yet (the seed table's runs say where the returns end)
    main.policy.setdefault("eval", {}).setdefault("evaluator", {})["eval_freq"] = 10**9
    main.log = dict(progress=False, profile=profile)  # log.profile: each stage's seconds (engine.profile)
    out_dir = tempfile.mkdtemp(prefix=f"offpolicy_{algo}_{mode.replace('@', '_')}_")
    pipeline = build_pipeline((main, create), seed=seed, max_env_step=10**9, exp_name=out_dir, force=True)
    started = time.perf_counter()
    learning: Dict[str, float] = {}

    profiler = (SpanProfile(cuda, pipeline.profile, os.environ.get("OFFPOLICY_PROFILE_DIR", "")) if profile
                else None)

    def clock(ctx) -> None:
        now = time.perf_counter()
        if "first" not in learning and ctx.train_iter > 0:
            learning.update(first=now)
        if "t" not in learning and ctx.train_iter >= SETTLED_ITER:
            learning.update(t=now, env_step=ctx.env_step, train_iter=ctx.train_iter)
            if profiler is not None:
                profiler.start()
        if ("t" in learning and now - learning["t"] >= seconds) or now - started >= cap_s:
            ctx.finish = True
            learning.update(end=now, end_env_step=ctx.env_step, end_train_iter=ctx.train_iter)
            if profiler is not None and profiler.running:
                profiler.stop(ctx.train_iter - learning["train_iter"], f"{algo} {mode}")

    pipeline.append(clock, name="wall_clock")
    summary = pipeline.run()
    if profiler is not None and profiler.running:  # the run ended another way (its stop value, an error)
        profiler.stop(max(summary.get("train_iter", 0) - learning.get("train_iter", 0), 1), f"{algo} {mode}")
    if "t" not in learning:
        print(f"{algo} {mode}: update {SETTLED_ITER} not reached in the {cap_s:g} s cap (--cap-s)", flush=True)
        return dict(env_steps_per_s=0.0, updates_per_s=0.0, settle_s=float("nan"), eval_return=float("nan"),
                    env_step=float(learning.get("end_env_step", 0)))
    span = learning["end"] - learning["t"]
    eval_return = summary.get("eval_return")
    return dict(env_steps_per_s=(learning["end_env_step"] - learning["env_step"]) / max(span, 1e-9),
                updates_per_s=(learning["end_train_iter"] - learning["train_iter"]) / max(span, 1e-9),
                settle_s=learning["t"] - learning["first"], span_s=span,
                eval_return=float("nan") if eval_return is None else float(eval_return),
                env_step=float(learning["end_env_step"]))


class SpanProfile:
    """Where an iteration's time goes over the timed span (``--profile``; the profilers slow the run, so its rate is
    not the figure): each stage's wall time (``log.profile``), the hottest Python functions (cProfile), the GPU's
    busy time (torch.profiler's kernel time) and the source lines of the host's waits for the device
    (``torch.cuda.set_sync_debug_mode("warn")``), each per iteration."""

    def __init__(self, cuda: bool, stages: Any = None, dump: str = "") -> None:
        import cProfile

        self.cuda, self.running, self.dump = cuda, False, dump
        self.stages = stages  # the pipeline's StageProfile (log.profile): each stage's seconds so far
        self._since: Dict[str, float] = {}
        self._cprofile = cProfile.Profile()
        self._torch = None
        self._caught: list = []
        self._warnings = None

    def start(self) -> None:
        import warnings

        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._torch = torch.profiler.profile(activities=activities)
        self._torch.__enter__()
        if self.cuda:
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        if self.stages is not None:
            self._since = self.stages.totals()
        self._cprofile.enable()
        self.running = True

    def stop(self, iterations: int, label: str) -> None:
        import collections
        import io
        import pstats

        self._cprofile.disable()
        self.running = False
        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
            self._warnings.__exit__(None, None, None)
        self._torch.__exit__(None, None, None)
        n = max(iterations, 1)
        if self.dump:  # the whole Python profile, for pstats on another machine
            self._cprofile.dump_stats(f"{self.dump}/{label.replace(' ', '-')}.pstats")
        print(f"--- profile of {label}: {n} iterations")
        if self.stages is not None:  # wall time: a stage that reads the device back also waits for it there
            spent = {k: v - self._since.get(k, 0.0) for k, v in self.stages.totals().items()}
            for stage, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
                if seconds > 0:
                    print(f"  stage {stage}: {1e3 * seconds / n:.3f} ms per iteration")
        stream = io.StringIO()
        pstats.Stats(self._cprofile, stream=stream).sort_stats("tottime").print_stats(18)
        print("\n".join("  " + line for line in stream.getvalue().splitlines()[-22:] if line.strip()))
        events = self._torch.key_averages()
        # as torch.profiler's table sums it: the kernels' own events (a launching op's and an annotation's device
        # time hold the same kernels again)
        gpu_us = sum(e.self_device_time_total for e in events
                     if e.device_type == torch.autograd.DeviceType.CUDA and not e.is_user_annotation)
        print(f"  GPU kernels: {gpu_us / n / 1e3:.3f} ms per iteration")
        if self.cuda:
            print(events.table(sort_by="self_device_time_total", row_limit=12, max_name_column_width=70))
        waits = collections.Counter(f"{w.filename}:{w.lineno}" for w in self._caught if "synchroniz" in str(w.message))
        for where, count in waits.most_common(12):
            print(f"  host waits for the device at {where}: {count / n:.2f} per iteration")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", default="sac,td3")
    parser.add_argument("--modes", default="none,cudagraph_update")
    parser.add_argument("--seconds", type=float, default=30.0, help="the timed span, from the 20th update on")
    parser.add_argument("--cap-s", type=float, default=120.0, help="end a run after this many seconds in all")
    parser.add_argument("--random-steps", type=int, default=5000, help="at most this random warm-up")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true",
                        help="where each iteration's time goes over the span (SpanProfile; its rate is not the "
                             "figure); with OFFPOLICY_PROFILE_DIR set, each run's cProfile is written there")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name(0) if cuda else "cpu (no CUDA: cudagraph_update runs eagerly)"
    print(f"device: {device}; torch {torch.__version__}; {args.seconds:g} s timed per run from update "
          f"{SETTLED_ITER} (at most {args.cap_s:g} s a run)", flush=True)
    rows: List[Dict[str, object]] = []
    for algo in args.algos.split(","):
        for mode in args.modes.split(","):
            row = dict(algo=algo, mode=mode, **training_run(algo, mode, args.seconds, args.seed, cuda, args.cap_s,
                                                                args.random_steps, args.profile))
            rows.append(row)
            print(f"{algo} {mode}: {row['env_steps_per_s']:.0f} env steps/s, {row['updates_per_s']:.0f} updates/s "
                  f"over {row.get('span_s', 0.0):.1f} s from update {SETTLED_ITER} on ({row['settle_s']:.1f} s to get "
                  f"there from the first); "
                  f"{row['env_step']:.0f} env steps in all",
                  flush=True)
    for algo in args.algos.split(","):
        mine = [r for r in rows if r["algo"] == algo]
        base = mine[0]["env_steps_per_s"] or float("nan")
        print(f"summary {algo}: " + "; ".join(f"{r['mode']} {r['env_steps_per_s']:.0f}/s "
                                              f"({r['env_steps_per_s'] / base:.2f}x)" for r in mine))


if __name__ == "__main__":
    main()
