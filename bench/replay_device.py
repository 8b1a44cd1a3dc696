"""Frame-stack replay in host memory against the same replay on the GPU: Pong-sized stacks (4 x 84 x 84
uint8, 8 envs), pushes of whole vector steps, batches sampled with their stacks rebuilt.

For each device: push throughput (through pinned staging on the GPU), and batches/s of ``sample`` (draw,
sampleability test, stack rebuild of obs and next_obs, gather of every field) with the batch on the
learner's GPU at the end: a host replay's batch is copied there, as the learner does, a GPU replay's is
there already. Uniform, and prioritized with the priorities written back. Without CUDA only the host
replay is measured (the GPU rows say why they are skipped).

Run: ``python bench/replay_device.py [--capacity 100000] [--batch-size 32] [--batches 2000] [--threads N]``.
"""
from __future__ import annotations

import argparse
import time
from typing import Dict, Iterator, Optional

import torch

from data.replay import FrameStackStorage, PrioritizedSampler, ReplayBuffer, UniformSampler

ENVS, K, H, W = 8, 4, 84, 84
STEPS_PER_PUSH = 16          # 128 transitions a push
EPISODE = 1000               # agent steps per episode (Pong: about 800 to 3,000), staggered per env


def pushes(capacity: int, seed: int = 0) -> Iterator[Dict[str, torch.Tensor]]:
    """Enough pushes to fill ``capacity``, laid out as a collector's (time-major whole vector steps)."""
    g = torch.Generator().manual_seed(seed)
    history = torch.randint(0, 256, (K, ENVS, H, W), generator=g, dtype=torch.uint8)  # last K frames per env
    windows = torch.arange(STEPS_PER_PUSH)[:, None] + torch.arange(K)[None, :]        # [T, K]
    step = 0
    for _ in range(-(-capacity // (ENVS * STEPS_PER_PUSH)) + 1):
        new = torch.randint(0, 256, (STEPS_PER_PUSH, ENVS, H, W), generator=g, dtype=torch.uint8)
        frames = torch.cat([history, new])                                          # [K + T, E, H, W]
        obs = frames[windows].permute(0, 2, 1, 3, 4).reshape(-1, K, H, W)          # [T * E, K, H, W]
        next_obs = frames[windows + 1].permute(0, 2, 1, 3, 4).reshape(-1, K, H, W)
        n = len(obs)
        clock = (step + torch.arange(STEPS_PER_PUSH)[:, None] + 1 + 97 * torch.arange(ENVS)[None, :]).reshape(-1)
        yield dict(obs=obs, next_obs=next_obs, action=torch.randint(0, 6, (n,), generator=g),
                   reward=torch.zeros(n), terminated=clock % EPISODE == 0, truncated=torch.zeros(n, dtype=torch.bool),
                   discount=torch.full((n,), 0.99), span=torch.ones(n, dtype=torch.uint8))
        history = frames[-K:]
        step += STEPS_PER_PUSH


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(capacity: int, device: torch.device, prioritized: bool) -> ReplayBuffer:
    sampler = (PrioritizedSampler(capacity, seed=0, device=device) if prioritized
               else UniformSampler(torch.Generator().manual_seed(0), device=device))
    return ReplayBuffer(capacity, sampler, FrameStackStorage(capacity, ENVS, K, device=device, frame_shape=(H, W)))


def fill(buffer: ReplayBuffer, capacity: int) -> float:
    """Push until full; returns transitions/s of the pushes alone (making the data is not timed)."""
    elapsed, pushed = 0.0, 0
    for push in pushes(capacity):
        _sync(buffer.device)
        start = time.perf_counter()
        buffer.push(push)
        _sync(buffer.device)
        elapsed += time.perf_counter() - start
        pushed += len(push["obs"])
    return pushed / elapsed


def batches_per_s(buffer: ReplayBuffer, batches: int, batch_size: int, learner: Optional[torch.device],
                  prioritized: bool) -> float:
    """``sample`` (plus the copy to ``learner`` when the batch is elsewhere, plus a priority update)."""
    def one() -> None:
        data = buffer.sample(batch_size)
        index = data.index
        if learner is not None and buffer.device != learner:  # what the learner's .to(device) does
            index = {k: getattr(data, k).to(learner, non_blocking=True) for k in data.keys()}["index"]
        if prioritized:  # the learner's TD errors, on its device
            buffer.update_priority(index, torch.rand(batch_size, device=index.device) + 0.1)

    for _ in range(20):
        one()
    _sync(buffer.device)
    if learner is not None:
        _sync(learner)
    start = time.perf_counter()
    for _ in range(batches):
        one()
    _sync(buffer.device)
    if learner is not None:
        _sync(learner)
    return batches / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cuda = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    devices = [torch.device("cpu")] + ([cuda] if cuda is not None else [])
    name = torch.cuda.get_device_name(cuda) if cuda is not None else "no CUDA device"
    print(f"frame-stack replay: {args.capacity:,} transitions of {K} x {H} x {W} uint8 stacks, {ENVS} envs, "
          f"batch {args.batch_size}, {args.batches} batches; torch {torch.__version__}, {name}, "
          f"{torch.get_num_threads()} torch threads")
    for device in devices:
        for prioritized in (False, True):
            buffer = build(args.capacity, device, prioritized)
            push_rate = fill(buffer, args.capacity)
            rate = batches_per_s(buffer, args.batches, args.batch_size, cuda, prioritized)
            where = f"copied to {cuda}" if cuda is not None and device != cuda else f"on {device}"
            kind = "prioritized sample + update" if prioritized else "uniform sample"
            print(f"  {str(device):7s} {kind:28s} {rate:9.0f} batches/s ({rate * args.batch_size:10.0f} "
                  f"transitions/s, batch {where}); push {push_rate:9.0f} transitions/s; storage "
                  f"{buffer.storage.nbytes() / 2**30:.2f} GiB")
            del buffer
    if cuda is None:
        print("  cuda    skipped: torch.cuda.is_available() is False (a CPU-only torch build or no GPU)")


if __name__ == "__main__":
    main()
