from __future__ import annotations

import numpy as np
import pytest
import torch

from data.replay import PrioritizedSampler, ReplayBuffer, RingStorage, SumTree, UniformSampler


def _batch(start, n):
    x = torch.arange(start, start + n)
    return {"obs": x.float().unsqueeze(1).repeat(1, 3), "action": x, "terminated": x % 2 == 0}


def test_ring_storage_wraps_around_and_overwrites_oldest():
    s = RingStorage(5)
    s.extend(_batch(0, 3))
    s.extend(_batch(3, 4))  # 7 written into 5 slots: 5, 6 overwrite 0, 1
    assert len(s) == 5
    assert s.fields["action"].tolist() == [5, 6, 2, 3, 4]
    assert s.fields["obs"][1].tolist() == [6.0, 6.0, 6.0]


def test_ring_storage_batch_larger_than_capacity_keeps_newest():
    s = RingStorage(4)
    s.extend(_batch(0, 10))
    assert sorted(s.fields["action"].tolist()) == [6, 7, 8, 9]
    s.extend(_batch(10, 1))
    assert 6 not in s.fields["action"].tolist() and 10 in s.fields["action"].tolist()


def test_ring_storage_rejects_other_fields():
    s = RingStorage(4)
    s.extend(_batch(0, 2))
    with pytest.raises(KeyError):
        s.extend({"obs": torch.zeros(2, 3)})


def test_replay_sample_is_treetensor_with_index_and_weight():
    b = ReplayBuffer(10)
    b.push(_batch(0, 10))
    data = b.sample(4)
    assert data.obs.shape == (4, 3) and data.index.dtype == torch.int64
    assert torch.equal(data.action, data.index)  # action i was stored in slot i
    assert torch.all(data.weight == 1)


def test_replay_uniform_sampling_distribution():
    torch.manual_seed(0)
    b = ReplayBuffer(8)
    b.push(_batch(0, 8))
    counts = torch.bincount(torch.cat([b.sample(64).action for _ in range(500)]), minlength=8).float()
    expected = 64 * 500 / 8
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 24.3  # 7 d.o.f., p = 0.001


def test_replay_empty_sample_raises():
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(4).sample(2)


def test_sumtree_totals_and_prefix_search():
    t = SumTree(5)
    t.update(np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 0.5]))
    assert t.total == pytest.approx(10.5) and t.min == pytest.approx(0.5)
    assert t.find_prefix_sum(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 6.0, 10.4])).tolist() == [0, 0, 1, 1, 2, 3, 4]
    t.update(np.array([2, 2]), np.array([5.0, 0.0]))  # the last write of an index wins
    assert t.total == pytest.approx(7.5)


def test_prioritized_sampling_follows_priorities():
    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, seed=0)
    b = ReplayBuffer(4, sampler)
    b.push(_batch(0, 4))
    b.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 2.0, 4.0]))
    counts = torch.bincount(torch.cat([b.sample(64).index for _ in range(400)]), minlength=4).float()
    freq = counts / counts.sum()
    assert torch.allclose(freq, torch.tensor([1, 1, 2, 4]) / 8.0, atol=0.02)


def test_prioritized_importance_weights():
    b = ReplayBuffer(4, PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0, seed=0))
    b.push(_batch(0, 4))
    b.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 2.0, 4.0]))
    data = b.sample(256)
    # w_i = (N P(i))^-beta / max_j (N P(j))^-beta = p_min / p_i with beta = 1
    expected = torch.tensor([1.0, 1.0, 0.5, 0.25])[data.index]
    assert torch.allclose(data.weight, expected)


def test_prioritized_new_transitions_get_max_priority():
    sampler = PrioritizedSampler(8, alpha=1.0, seed=0)
    b = ReplayBuffer(8, sampler)
    b.push(_batch(0, 2))
    b.update_priority(torch.tensor([0, 1]), torch.tensor([0.1, 3.0]))
    b.push(_batch(2, 1))
    assert sampler._tree[np.array([2])][0] == pytest.approx(3.0 + 1e-6)


def test_uniform_sampler_has_no_priorities():
    b = ReplayBuffer(4)
    b.push(_batch(0, 4))
    with pytest.raises(TypeError, match="PrioritizedSampler"):
        b.update_priority(torch.arange(2), torch.ones(2))


def test_replay_rejects_wrong_sampler_type():
    with pytest.raises(TypeError, match="Sampler"):
        ReplayBuffer(4, sampler="uniform")


@pytest.mark.parametrize("priority", [False, True])
def test_replay_state_dict_round_trip(priority):
    def make():
        sampler = PrioritizedSampler(6, seed=0) if priority else UniformSampler(torch.Generator().manual_seed(0))
        return ReplayBuffer(6, sampler)

    b = make()
    b.push(_batch(0, 4))
    other = make()
    other.load_state_dict(b.state_dict())
    assert len(other) == 4 and torch.equal(other.storage.fields["action"][:4], torch.arange(4))
    other.push(_batch(4, 3))
    assert other.storage.fields["action"].tolist() == [6, 1, 2, 3, 4, 5]


def test_sumtree_matches_brute_force_under_random_updates():
    rng = np.random.default_rng(0)
    cap = 37  # not a power of two
    tree, truth, written = SumTree(cap), np.zeros(cap), np.zeros(cap, dtype=bool)
    for _ in range(200):
        idx = rng.integers(0, cap, 16)  # with repeats
        vals = rng.random(16)
        tree.update(idx, vals)
        for i, v in zip(idx, vals):  # the last write of a repeated index wins
            truth[i] = v
            written[i] = True
        assert tree.total == pytest.approx(truth.sum())
        assert tree.min == pytest.approx(truth[written].min())  # leaves never written do not count
    mass = rng.random(100) * truth.sum()
    expected = np.searchsorted(np.cumsum(truth), mass, side="right")
    assert np.array_equal(tree.find_prefix_sum(mass), np.minimum(expected, cap - 1))
