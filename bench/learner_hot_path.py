"""The DQN Pong learner's update alone, per ``policy.compile`` mode: where an update's time goes.

Issue 11 asks for >= 1,500 DQN updates/s at batch 32 on one GPU; the first H200 run measured 202 (eager) and
113 (``cudagraph``) through ``bench/atari_pong.py``, whose loop also samples the frame-stack replay on the host
and copies each batch over. This bench takes the replay out: one fixed batch of random Pong-shaped
transitions (4 x 84 x 84 uint8 stacks), and for each mode, side by side in one run:

- updates/s with the batch already on the learner's device (the hot path, the backward, the fused Adam step
  and the target update: what ``policy.compile`` can speed up);
- updates/s with the batch in host memory (plus the copy each update makes; pinned with ``--pin``);
- graphs compiled and recompilations during the timed updates (a recompile in the loop is a bug), CUDA
  graph trees' skips and re-recordings, and the host reads (``torch.cuda.set_sync_debug_mode``) counted
  per update with the source lines that made them;
- updates/s drawn from a replay on the learner's device (a ring of random Pong transitions): the learner's
  loop (``buffer.sample`` and one forward per update), or with ``cudagraph_update`` the captured program of
  ``--per-call`` updates per graph replay (``policies.update_graph``: the draw, the gather and the whole update
  in one CUDA graph); this is the figure issue 33 compares with LeanRL's one-graph update;
- with ``--profile``, torch.profiler's top operations of ten updates.

Run: ``python bench/learner_hot_path.py [--modes none,compile,cudagraph,cudagraph_update] [--updates 300]
[--warmup 30] [--batch-size 32] [--per-call 4] [--amp none|bf16] [--profile]``. On a machine without CUDA the modes run on the CPU
(``cudagraph`` is eager there, with a warning), the sync count is skipped.
"""
from __future__ import annotations

import argparse
import collections
import copy
import time
import warnings
from typing import Dict, List

import gymnasium as gym
import numpy as np
import torch

from data.batch import make_batch
from data.replay import ReplayBuffer
from dizoo.atari.config.serial.pong.pong_dqn_config import create_config, main_config
from engine import compile_config
from engine.devices import size_torch_threads
from policies import DQNPolicy

OBS_SHAPE, ACTIONS = (4, 84, 84), 6


def random_batch(batch_size: int, device: torch.device, pin: bool) -> object:
    g = torch.Generator().manual_seed(0)
    fields = dict(
        obs=torch.randint(0, 256, (batch_size, *OBS_SHAPE), generator=g, dtype=torch.uint8),
        next_obs=torch.randint(0, 256, (batch_size, *OBS_SHAPE), generator=g, dtype=torch.uint8),
        action=torch.randint(0, ACTIONS, (batch_size,), generator=g),
        reward=torch.randint(-1, 2, (batch_size,), generator=g).float(),
        discount=torch.full((batch_size,), 0.99 ** 3),
        terminated=torch.rand(batch_size, generator=g) < 0.01,
        truncated=torch.zeros(batch_size, dtype=torch.bool),
        weight=torch.ones(batch_size),
        index=torch.arange(batch_size),
    )
    if device.type != "cpu":
        fields = {k: v.to(device) for k, v in fields.items()}
    elif pin and torch.cuda.is_available():
        fields = {k: v.pin_memory() for k, v in fields.items()}
    return make_batch(fields)


def _counters() -> Dict[str, int]:
    from torch._dynamo.utils import counters
    out = {f"dynamo.{k}": int(v) for k, v in counters["stats"].items()}
    out.update({f"inductor.{k}": int(v) for k, v in counters["inductor"].items() if "cudagraph" in k})
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_updates(policy: DQNPolicy, batch: object, updates: int, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in range(updates):
        policy.learn_mode.forward(batch)
    _sync(device)
    return updates / (time.perf_counter() - start)


def replay_buffer(device: torch.device, size: int = 2048) -> ReplayBuffer:
    """A ring of ``size`` random Pong transitions on ``device`` (the replay ``cudagraph_update`` draws from)."""
    buffer = ReplayBuffer(size, device=device)
    for _ in range(size // 256):
        batch = random_batch(256, torch.device("cpu"), pin=False)
        buffer.push({k: v for k, v in batch.items() if k not in ("index", "weight")})
    return buffer


def replay_rate(policy: DQNPolicy, mode: str, args: argparse.Namespace, device: torch.device) -> float:
    """Updates/s drawn from a replay on ``device``: the captured program under ``cudagraph_update`` (where it
    captures), else the learner's loop of one ``sample`` and one forward per update."""
    buffer = replay_buffer(device)
    per_call = args.per_call
    graphed = policy.learn_mode.graphed_updates(buffer, args.batch_size, per_call) if mode == "cudagraph_update" else None

    def call() -> None:
        if graphed is not None and graphed.failed is None:
            graphed.run()
            if graphed.failed is None:
                return  # else (named in a warning) these updates and the rest run one by one, as the learner does
        for _ in range(per_call):
            policy.learn_mode.forward(buffer.sample(args.batch_size))

    for _ in range(max(3, args.warmup // per_call)):
        call()
    _sync(device)
    calls = max(1, args.updates // per_call)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    _sync(device)
    return calls * per_call / (time.perf_counter() - start)


def host_reads(policy: DQNPolicy, batch: object, updates: int) -> "collections.Counter":
    """Source lines of the synchronizing CUDA calls of ``updates`` updates (torch's sync debug mode)."""
    lines: collections.Counter = collections.Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(updates):
                policy.learn_mode.forward(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        if "synchroniz" in str(w.message):
            lines[f"{w.filename}:{w.lineno}"] += 1
    return lines


def profile(policy: DQNPolicy, batch: object, device: torch.device) -> str:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(10):
            policy.learn_mode.forward(batch)
        _sync(device)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60)


def run_mode(cfg, mode: str, args: argparse.Namespace, device: torch.device) -> Dict[str, object]:
    cfg = copy.deepcopy(cfg)
    cfg.policy.compile, cfg.policy.amp = mode, args.amp

    def fresh_policy() -> DQNPolicy:
        torch.manual_seed(0)
        obs_space = gym.spaces.Box(0, 255, OBS_SHAPE, np.uint8)
        return DQNPolicy(cfg.policy, obs_space, gym.spaces.Discrete(ACTIONS), device=device)

    policy = fresh_policy()
    on_device = random_batch(args.batch_size, device, pin=False)
    on_host = random_batch(args.batch_size, torch.device("cpu"), pin=args.pin)
    start = time.perf_counter()
    for _ in range(args.warmup):
        policy.learn_mode.forward(on_device)
    _sync(device)
    warmup_s = time.perf_counter() - start
    before = _counters()
    device_rate = timed_updates(policy, on_device, args.updates, device)
    host_rate = timed_updates(policy, on_host, args.updates, device)
    # the captured program starts from a policy no eager update has touched, as the learner's does: on an H200 the
    # eager loop's autograd nodes of the parameters, made on the default stream and still alive, ended the capture
    # (CUDA: "operation would make the legacy stream depend on a capturing blocking stream"; docs/performance.md)
    replay = replay_rate(fresh_policy() if mode == "cudagraph_update" else policy, mode, args, device)
    after = _counters()
    changed = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    row: Dict[str, object] = dict(mode=mode, warmup_s=warmup_s, device_rate=device_rate, host_rate=host_rate,
                                  replay_rate=replay,
                                  counters_in_timed_loop=changed, counters_total=after,
                                  hot_paths=[repr(p) for p in policy.hot_paths.values()])
    if device.type == "cuda":
        row["host_reads_per_10_updates"] = dict(host_reads(policy, on_device, 10))
    if args.profile:
        row["profile"] = profile(policy, on_device, device)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="none,compile,cudagraph,cudagraph_update")
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--per-call", type=int, default=4, help="updates per learner call (update_per_collect)")
    parser.add_argument("--amp", default="none", choices=["none", "bf16"])
    parser.add_argument("--pin", action="store_true", help="pin the host batch (the copy can then overlap)")
    parser.add_argument("--profile", action="store_true", help="torch.profiler's top operations per mode")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    cfg = compile_config(main_config, create_config, save=False)
    threads = size_torch_threads(cfg.torch_threads)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; torch threads {threads}; batch {args.batch_size}; "
          f"amp {args.amp}; {args.updates} timed updates after {args.warmup} warm-up updates")
    rows: List[Dict[str, object]] = []
    for mode in args.modes.split(","):
        row = run_mode(cfg, mode, args, device)
        rows.append(row)
        print(f"\n== policy.compile={mode}: {row['device_rate']:.0f} updates/s (batch on {device.type}), "
              f"{row['host_rate']:.0f} updates/s (batch on the host{', pinned' if args.pin else ''}); "
              f"{row['replay_rate']:.0f} updates/s drawn from a replay on {device.type}; "
              f"warm-up {row['warmup_s']:.1f} s")
        print(f"   hot paths: {row['hot_paths']}")
        print(f"   counters changed in the timed loop: {row['counters_in_timed_loop'] or 'none'}")
        print(f"   counters in all: {row['counters_total']}")
        if "host_reads_per_10_updates" in row:
            print(f"   host reads in 10 updates: {row['host_reads_per_10_updates'] or 'none'}")
        if "profile" in row:
            print(row["profile"])
    base, replay_base = rows[0]["device_rate"], rows[0]["replay_rate"]
    print("\nsummary: " + "; ".join(f"{r['mode']} {r['device_rate']:.0f}/s ({r['device_rate'] / base:.2f}x), "
                                    f"host batch {r['host_rate']:.0f}/s, from the replay {r['replay_rate']:.0f}/s "
                                    f"({r['replay_rate'] / replay_base:.2f}x)" for r in rows))


if __name__ == "__main__":
    main()
