"""Sequence replay (``data.replay.SequenceStorage``): consecutive steps of one env handed out as ``[B, L]``
sequences for a recurrent learner, only while whole, across the ring's wrap and a checkpoint."""
from __future__ import annotations

import doctest

import pytest
import torch

import data.replay.sequence_storage as module
from data.obs import from_plain
from data.replay import PrioritizedSampler, ReplayBuffer, SequenceStorage, UniformSampler


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
    assert out["state"].shape == (2, 1, 1) and out["state"].flatten().tolist() == [1.0, 2.0]  # the first step's


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


def test_a_resumed_buffer_restarts_the_memory_where_the_saved_steps_end():
    """The resumed run's envs start new episodes from zero memory: a sequence across the join says so."""
    s = SequenceStorage(40, num_envs=2, seq_len=4)
    s.extend(_steps(0, 6, 2))
    again = SequenceStorage(40, num_envs=2, seq_len=4)
    again.load_state_dict(s.state_dict())
    again.extend(_steps(12, 6, 2))
    out = again.gather(torch.tensor([8]))                      # env 0's steps 4, 5 (saved), 6, 7 (resumed)
    assert out["x"].tolist() == [[8, 10, 12, 14]] and out["episode_start"].tolist() == [[False, False, True, False]]


def test_prioritized_sampling_gives_a_start_its_priority_once_its_sequence_is_whole():
    """A start slot gets the highest priority when its sequence's last step arrives, the mean one before: at the
    highest, the slots that wait would take most draws once the learnt priorities fall, each refused and drawn
    again until the sampler gives up."""
    b = ReplayBuffer(64, PrioritizedSampler(64, alpha=1.0, beta=0.4, seed=0), SequenceStorage(64, num_envs=2,
                                                                                              seq_len=4))
    b.push(_steps(0, 8, 2))
    b.update_priority(torch.arange(10), torch.full((10,), 1e-3))   # the whole starts learnt; the max stays 1
    b.push(_steps(16, 1, 2))                                       # completes the starts at slots 10 and 11
    weights = b.sampler.weights(torch.arange(18))
    mean = (10 * (1e-3 + b.sampler.eps) + 8) / 18                  # the 6 waiting slots' 1 and the 2 new slots' max
    assert (weights[10:12] == 1).all() and torch.allclose(weights[12:], torch.tensor(mean, dtype=torch.float64))
    for _ in range(50):
        batch = b.sample(8)
        assert b.storage.sampleable(batch.index).all() and (batch.weight > 0).all()
