"""Replay sampling speed: batches of 64 from a full 1M-transition CartPole buffer, uniform and prioritized.

Run: ``python bench/replay_sampling.py``.
"""
from __future__ import annotations

import argparse
import time

import torch

from data.replay import PrioritizedSampler, ReplayBuffer

CAPACITY = 1_000_000


def filled(prioritized: bool) -> ReplayBuffer:
    buffer = ReplayBuffer(CAPACITY, PrioritizedSampler(CAPACITY) if prioritized else None)
    chunk = 100_000
    for _ in range(CAPACITY // chunk):
        buffer.push({"obs": torch.randn(chunk, 4), "next_obs": torch.randn(chunk, 4),
                     "action": torch.randint(0, 2, (chunk,)), "reward": torch.ones(chunk),
                     "terminated": torch.zeros(chunk, dtype=torch.bool),
                     "truncated": torch.zeros(chunk, dtype=torch.bool), "discount": torch.full((chunk,), 0.99)})
    return buffer


def transitions_per_s(buffer: ReplayBuffer, batches: int, batch_size: int = 64, prioritized: bool = False) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        data = buffer.sample(batch_size)
        if prioritized:  # a learner also writes the priorities back
            buffer.update_priority(data.index, torch.rand(batch_size))
    return batches * batch_size / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=5000)
    args = parser.parse_args()
    uniform = transitions_per_s(filled(False), args.batches)
    prioritized_buffer = filled(True)
    prioritized = transitions_per_s(prioritized_buffer, args.batches)
    with_update = transitions_per_s(prioritized_buffer, args.batches, prioritized=True)
    print(f"uniform:                          {uniform:12.0f} transitions/s")
    print(f"prioritized (sample):             {prioritized:12.0f} transitions/s ({prioritized / uniform:.2f} of uniform)")
    print(f"prioritized (sample + update):    {with_update:12.0f} transitions/s ({with_update / uniform:.2f} of uniform)")


if __name__ == "__main__":
    main()
