"""A run saved by N ranks resumes on M: every saved transition lands on exactly one rank (issue 13.6)."""
from __future__ import annotations

import collections
import json
import os

import pytest
import torch

import ddp_workers
from data.replay import PrioritizedSampler, ReplayBuffer
from data.replay.reshard import load_shards, shard_plan
from engine import launch

TIMEOUT = 30.0


def _rows(counter_of):
    return collections.Counter(tuple(row) for row in counter_of)


@pytest.mark.parametrize("saved,new", [(1, 1), (2, 1), (1, 2), (3, 2), (2, 3), (2, 5), (4, 2)])
def test_shard_plan_deals_every_saved_transition_to_exactly_one_rank(saved, new):
    sizes = [7 + n for n in range(saved)]
    taken = collections.Counter()
    for rank in range(new):
        for shard, part, parts in shard_plan(saved, new, rank):
            taken.update((shard, i) for i in range(part, sizes[shard], parts))
    assert taken == collections.Counter((n, i) for n in range(saved) for i in range(sizes[n]))
    if saved == new:
        assert all(shard_plan(saved, new, r) == [(r, 0, 1)] for r in range(new))  # exact: shard r to rank r


def _prioritized(capacity=16):
    return ReplayBuffer(capacity, PrioritizedSampler(capacity, alpha=0.5))


def test_dealt_and_merged_shards_keep_their_transitions_and_priorities():
    shards = []
    for n in range(2):
        buffer = _prioritized()
        buffer.push({"obs": torch.arange(10.0) + 100 * n})
        buffer.update_priority(torch.arange(10), torch.arange(10.0) + 1 + 10 * n)
        shards.append(buffer.state_dict())
    merged = _prioritized(capacity=32)
    load_shards(merged, shard_plan(2, 1, 0), lambda n: shards[n], lambda: _prioritized())
    fields, weights = merged.transitions()
    assert fields["obs"].tolist() == list(range(10)) + list(range(100, 110))
    expected = torch.cat([torch.arange(10.0) + 1, torch.arange(10.0) + 11]) + 1e-6
    assert torch.allclose(weights.float(), expected ** 0.5)
    halves = []
    for rank in range(2):
        half = _prioritized()
        load_shards(half, shard_plan(1, 2, rank), lambda n: shards[0], lambda: _prioritized())
        halves.append(half.transitions()[0]["obs"].tolist())
    assert halves == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]


def test_a_merge_beyond_capacity_keeps_the_newest():
    shards = []
    for n in range(2):
        buffer = ReplayBuffer(8)
        buffer.push({"obs": torch.arange(8.0) + 100 * n})
        shards.append(buffer.state_dict())
    merged = ReplayBuffer(8)
    load_shards(merged, shard_plan(2, 1, 0), lambda n: shards[n], lambda: ReplayBuffer(8))
    assert merged.transitions()[0]["obs"].tolist() == [float(x) for x in range(100, 108)]


def _read(out_dir, name, rank):
    with open(os.path.join(out_dir, f"{name}_rank{rank}.json")) as f:
        return json.load(f)


@pytest.mark.distributed
def test_two_ranks_saved_resume_on_one_with_both_shards(tmp_path):
    launch(ddp_workers.sharded_replay_run, nprocs=2, args=(str(tmp_path),), timeout=TIMEOUT)
    ckpt = tmp_path / "exp_seed0" / "ckpt"
    assert (ckpt / "latest.rank1.pth.tar").is_file()  # rank 1's shard beside rank 0's checkpoint
    saved = _rows(_read(tmp_path, "fresh", 0)["end"]) + _rows(_read(tmp_path, "fresh", 1)["end"])
    env_step = _read(tmp_path, "fresh", 0)["summary"]["env_step"]
    ddp_workers.sharded_replay_run(str(tmp_path), resume=True, max_env_step=env_step + 32)
    resumed = _read(tmp_path, "resumed", 0)
    assert _rows(resumed["after_resume"]) == saved
    assert resumed["summary"]["env_step"] == env_step + 32  # the counters went on from the checkpoint


@pytest.mark.distributed
def test_one_rank_saved_resumes_on_two_dealt_between_them(tmp_path):
    ddp_workers.sharded_replay_run(str(tmp_path))
    saved = _rows(_read(tmp_path, "fresh", 0)["end"])
    env_step = _read(tmp_path, "fresh", 0)["summary"]["env_step"]
    launch(ddp_workers.sharded_replay_run, nprocs=2, args=(str(tmp_path), True, env_step + 64), timeout=TIMEOUT)
    parts = [_rows(_read(tmp_path, "resumed", r)["after_resume"]) for r in range(2)]
    assert parts[0] + parts[1] == saved
    assert abs(sum(parts[0].values()) - sum(parts[1].values())) <= 1
    ends = [_read(tmp_path, "resumed", r)["summary"] for r in range(2)]
    assert ends[0]["env_step"] == ends[1]["env_step"] >= env_step + 64


@pytest.mark.distributed
def test_two_ranks_resumed_on_one_learn_only_once_the_buffer_is_ready(tmp_path):
    """The learner gate a DDP run agreed on last is no vote of a one-process run: resumed alone without the
    saved replay (``ckpt.save_replay_buffer=False``), the learner waits for its own buffer, as a fresh run does
    (a recurrent QMIX run crashed instead: 'too few complete transitions to sample from yet')."""
    launch(ddp_workers.learn_gate_run, nprocs=2, args=(str(tmp_path),), timeout=TIMEOUT)
    fresh = _read(tmp_path, "fresh", 0)
    assert any(updates for _, updates in fresh["steps"])  # the saved run trained: its gate was open at the end
    ddp_workers.learn_gate_run(str(tmp_path), resume=True, max_env_step=fresh["summary"]["env_step"] + 256)
    steps = _read(tmp_path, "resumed", 0)["steps"]
    assert not steps[0][0]  # one collect of 16: below batch_size 64
    assert all(updates == 0 for ready, updates in steps if not ready), steps
    assert any(updates for _, updates in steps)  # and it trains once its buffer is ready
