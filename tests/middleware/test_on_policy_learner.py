"""OnPolicyLearner: epochs of shuffled minibatches over the rollout, gathered on the learner's device, with
the statistics read from the device once per call rather than once per update."""
from __future__ import annotations

import pytest
import torch

from data.batch import make_batch
from engine import OnlineRLContext
from middleware import OnPolicyLearner


class RecordingPolicy:
    """A learn mode that records each minibatch and returns its mean reward as the loss (a tensor)."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.model = torch.nn.Linear(1, 1)
        self.batches = []

    def forward(self, batch):
        self.batches.append(batch)
        loss = torch.ones(()) if batch.reward.device.type == "meta" else batch.reward.float().mean()
        return {"loss": loss, "updates": 1}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _rollout(n=10):
    return make_batch({"obs": torch.arange(n * 3, dtype=torch.float32).reshape(n, 3),
                       "reward": torch.arange(n, dtype=torch.float32)})


def test_every_transition_once_per_epoch_and_the_means_over_updates():
    policy = RecordingPolicy("cpu")
    ctx = OnlineRLContext()
    ctx.trajectories = _rollout(10)
    OnPolicyLearner(policy, epochs=2, batch_size=4, generator=torch.Generator().manual_seed(0))(ctx)
    assert ctx.train_iter == 6 and len(policy.batches) == 6  # 4 + 4 + 2, twice
    for epoch in (policy.batches[:3], policy.batches[3:]):
        assert sorted(torch.cat([b.reward for b in epoch]).tolist()) == list(range(10))
    expected = sum(float(b.reward.mean()) for b in policy.batches) / 6
    assert ctx.train_output["loss"] == pytest.approx(expected) and ctx.train_output["updates"] == 1


def test_the_rollout_is_gathered_on_the_learners_device():
    """The rollout moves to ``policy.device`` once and each minibatch is indexed there (the meta device
    stands in for a GPU: its tensors have shapes and a device but no data)."""
    policy = RecordingPolicy("meta")
    ctx = OnlineRLContext()
    ctx.trajectories = _rollout(8)
    OnPolicyLearner(policy, epochs=1, batch_size=4)(ctx)
    assert [b.obs.device.type for b in policy.batches] == ["meta", "meta"]
    assert [tuple(b.obs.shape) for b in policy.batches] == [(4, 3), (4, 3)]


def test_statistics_are_read_once_per_call_not_once_per_update(monkeypatch):
    """Reading a CUDA tensor's value waits for the GPU; a read per update would serialise the learner."""
    reads = []
    for name in ("__float__", "item", "tolist"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _o=original, _n=name: reads.append(_n) or _o(self, *a))
    policy = RecordingPolicy("cpu")
    ctx = OnlineRLContext()
    ctx.trajectories = _rollout(32)
    OnPolicyLearner(policy, epochs=4, batch_size=4)(ctx)
    assert ctx.train_iter == 32
    assert len(reads) == 1  # the one tensor statistic ("loss"), once


def test_end_epoch_is_called_after_each_epoch_where_the_policy_has_one():
    """PPO's adaptive learning rate steers by each epoch's KL: the learner tells the policy where an epoch ends."""
    policy = RecordingPolicy("cpu")
    marks = []
    policy.end_epoch = lambda: marks.append(len(policy.batches))
    ctx = OnlineRLContext()
    ctx.trajectories = _rollout(10)
    OnPolicyLearner(policy, epochs=3, batch_size=4)(ctx)
    assert marks == [3, 6, 9]
