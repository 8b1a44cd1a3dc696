"""Sequence replay (``data.replay.SequenceStorage``): consecutive steps of one env handed out as ``[B, L]``
sequences for a recurrent learner, only while whole, across the ring's wrap and a checkpoint."""
from __future__ import annotations

import doctest

import pytest
import torch

import data.replay.sequence_storage as module
from data.obs import from_plain
from data.replay import ReplayBuffer, SequenceStorage, UniformSampler


def _steps(start: int, steps: int, envs: int, done_at=()):
    """``steps`` whole vector steps of ``envs`` envs, time-major, each field holding its write count."""
    count = torch.arange(start, start + steps * envs)
    done = torch.zeros(steps * envs, dtype=torch.bool)
    for slot in done_at:
        done[slot - start] = True
    return {"x": count, "obs": from_plain({"a": count.float().unsqueeze(1), "b": -count.unsqueeze(1)}),
            "terminated": done, "truncated": torch.zeros_like(done), "state": count.float().view(-1, 1, 1),
            "next_state": count.float().view(-1, 1, 1)}


def test_the_examples_hold():
    assert doctest.testmod(module).failed == 0


def test_a_sequence_is_one_env_s_consecutive_steps_with_the_episode_starts_inside_it():
    s = SequenceStorage(64, num_envs=3, seq_len=4)
    s.extend(_steps(0, 6, 3, done_at=(4,)))                 # env 1 ended its episode at its step 1
    out = s.gather(torch.tensor([1, 2]))
    assert out["x"].tolist() == [[1, 4, 7, 10], [2, 5, 8, 11]]
    assert out["episode_start"].tolist() == [[False, False, True, False], [False] * 4]
    assert out["obs"]["a"].shape == (2, 4, 1) and out["obs"]["b"][:, :, 0].tolist() == [[-1, -4, -7, -10],
                                                                                          [-2, -5, -8, -11]]
    assert "next_state" not in out and "done" not in out     # rebuilt by the learner; bookkeeping
    assert out["state"].shape == (2, 4, 1, 1)


def test_only_whole_sequences_are_sampleable_across_the_ring_s_wrap():
    s = SequenceStorage(24, num_envs=2, seq_len=3)
    s.extend(_steps(0, 8, 2))                                 # counts 0..15 in slots 0..15
    assert s.sampleable(torch.tensor([0, 11, 12])).tolist() == [True, True, False]
    s.extend(_steps(16, 8, 2))                                # counts 16..31: slots 16..23 then 0..7
    whole = s.sampleable(torch.arange(24))
    # written from count 8 on (slots 8..23 and 0..7 hold counts 8..31): starts at counts 8..27 are whole
    counts = torch.tensor([c for c in range(8, 32)])
    slots = counts % 24
    assert whole[slots].tolist() == [c <= 27 for c in counts.tolist()]
    out = s.gather(torch.tensor([22]))                        # count 22, 24, 26: across the wrap
    assert out["x"].tolist() == [[22, 24, 26]]


def test_a_buffer_samples_whole_sequences_only_and_keeps_them_through_a_checkpoint():
    def buffer():
        return ReplayBuffer(40, UniformSampler(torch.Generator().manual_seed(0)),
                            SequenceStorage(40, num_envs=2, seq_len=5))
    b = buffer()
    b.push(_steps(0, 12, 2))
    for _ in range(20):
        batch = b.sample(6)
        x = batch.x
        assert x.shape == (6, 5) and batch.index.shape == (6,) and batch.weight.shape == (6,)
        assert (x[:, 1:] - x[:, :-1] == 2).all()             # the same env, step after step
    again = buffer()
    again.load_state_dict(b.state_dict())
    assert torch.equal(again.storage.gather(torch.arange(10))["x"], b.storage.gather(torch.arange(10))["x"])
    assert torch.equal(again.storage.sampleable(torch.arange(40)), b.storage.sampleable(torch.arange(40)))


def test_pushes_that_are_not_whole_vector_steps_and_buffers_too_small_are_refused():
    with pytest.raises(ValueError, match="at least 40"):
        SequenceStorage(30, num_envs=2, seq_len=10)
    s = SequenceStorage(40, num_envs=2, seq_len=5)
    step = _steps(0, 2, 2)
    with pytest.raises(ValueError, match="whole vector steps of 2 envs"):
        s.extend({k: v[:3] for k, v in step.items()})
    with pytest.raises(ValueError, match="written for 2 envs"):
        SequenceStorage(40, num_envs=4, seq_len=5).load_state_dict(s.state_dict())
