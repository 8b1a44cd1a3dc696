"""Task-loop overhead: microseconds per iteration for 5 trivial middleware, against a plain loop.

Run: ``python bench/task_overhead.py [--iters N] [--profile]``. Both loops call the same 5 functions (one
of them a generator middleware); the difference is what the task loop itself costs (onion bookkeeping,
``renew``). ``--profile`` adds the task loop with a ``StageProfile`` (``log.profile``): with middleware
that do nothing, the dearest case for its clock readings.
"""
from __future__ import annotations

import argparse
import time

from engine import Context, OnlineRLContext, Task
from engine.profile import StageProfile


def _a(ctx):
    ctx.total_step


def _b(ctx):
    ctx.finish


def _c(ctx):
    ctx.total_step


def _d(ctx):
    ctx.finish


def _gen(ctx):
    yield


MIDDLEWARE = [_a, _b, _gen, _c, _d]


def task_loop_us(ctx_cls: type, iters: int, profile: bool = False) -> float:
    task = Task()
    with task.start(ctx=ctx_cls()):
        for mw in MIDDLEWARE:
            task.use(mw)
        start = time.perf_counter()
        task.run(max_step=iters, profile=StageProfile() if profile else None)
        return (time.perf_counter() - start) / iters * 1e6


def plain_loop_us(iters: int) -> float:
    ctx = OnlineRLContext()
    fns = [_a, _b, _c, _d]
    start = time.perf_counter()
    for _ in range(iters):
        for fn in fns:
            fn(ctx)
        for _ in _gen(ctx):
            pass
    return (time.perf_counter() - start) / iters * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iters", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="also time the loop with a StageProfile")
    args = parser.parse_args()
    results = {"Task.run, Context": [], "Task.run, OnlineRLContext": [], "plain loop, same 5 functions": []}
    if args.profile:
        results["Task.run, OnlineRLContext, profiled"] = []
    for _ in range(args.repeats):  # interleaved, best of N: the same machine state for all of them
        results["Task.run, Context"].append(task_loop_us(Context, args.iters))
        results["Task.run, OnlineRLContext"].append(task_loop_us(OnlineRLContext, args.iters))
        results["plain loop, same 5 functions"].append(plain_loop_us(args.iters))
        if args.profile:
            results["Task.run, OnlineRLContext, profiled"].append(task_loop_us(OnlineRLContext, args.iters, True))
    for name, values in results.items():
        print(f"{name:36s} {min(values):6.2f} us/iter (best of {args.repeats}, {args.iters} iters)")


if __name__ == "__main__":
    main()
