"""No host read in a learner update off the host (issue 24: "no host sync in a hot loop").

On a GPU every read of a device value on the host (``.item()``, ``bool(t)``, ``float(t)``, ``.tolist()``,
``.cpu()``, ``.numpy()``) waits for the device to finish all queued work, so one per update stops the host
from running ahead and the GPU idles between updates. CI has no GPU, so these tests run the device path on
CPU tensors: ``data.replay.device.host_path`` is the one switch between the two paths (patched to False
here), and every host read made during an update is counted, except the deferred check's read of its
flag, which on a GPU is pinned host memory that the device has long written.
"""
from __future__ import annotations

import collections
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

import data.replay.device
import policies.optim
from data.batch import make_batch
from engine.config import deep_merge
from policies import DQNPolicy, NonFiniteLossError, PPOPolicy, SACPolicy

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
HOST_READS = ("item", "__bool__", "__float__", "__int__", "tolist", "numpy", "cpu")


def _transitions(n: int, action: torch.Tensor) -> dict:
    g = torch.Generator().manual_seed(0)
    return dict(obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g), action=action,
                reward=torch.randn(n, generator=g), terminated=torch.arange(n) % 3 == 0,
                truncated=torch.zeros(n, dtype=torch.bool), discount=torch.full((n,), 0.99), weight=torch.ones(n),
                logp=torch.full((n,), -0.7), adv=torch.randn(n, generator=g), returns=torch.randn(n, generator=g),
                value=torch.randn(n, generator=g))


def _dqn():
    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(model=dict(encoder_hidden_size_list=[16]))))
    return DQNPolicy(cfg, OBS, gym.spaces.Discrete(2)), _transitions(8, torch.arange(8) % 2)


def _ppo():
    cfg = EasyDict(deep_merge(PPOPolicy.default_config(), dict(learn=dict(grad_clip_value=0.0))))
    return PPOPolicy(cfg, OBS, gym.spaces.Discrete(2)), _transitions(8, torch.arange(8) % 2)


def _sac():
    cfg = EasyDict(deep_merge(SACPolicy.default_config(), dict(
        model=dict(actor_head_hidden_size_list=[16], critic_head_hidden_size_list=[16]))))
    return SACPolicy(cfg, OBS, gym.spaces.Box(-2.0, 2.0, (1,), np.float32)), _transitions(8, torch.rand(8, 1))


@pytest.fixture
def device_path(monkeypatch):
    """The policies' device path on CPU tensors, and a counter of host reads (by where they were made)."""
    monkeypatch.setattr(policies.optim, "host_path", lambda device: False)
    monkeypatch.setattr(data.replay.device, "host_path", lambda device: False)
    reads: collections.Counter = collections.Counter()
    counting = [False]
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            if counting[0]:
                caller = sys._getframe(1)
                if caller.f_code.co_name != "flush":  # the deferred check's pinned flag (module docstring)
                    reads[f"{_name} at {caller.f_code.co_filename}:{caller.f_lineno}"] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    def update(policy, batch):
        counting[0] = True
        try:
            return policy.learn_mode.forward(batch)
        finally:
            counting[0] = False

    return reads, update


@pytest.mark.parametrize("build", [_dqn, _ppo, _sac], ids=["dqn", "ppo", "sac"])
def test_an_update_reads_nothing_back_from_the_device(device_path, build):
    reads, update = device_path
    torch.manual_seed(0)
    policy, transitions = build()
    batch = make_batch(transitions)
    for _ in range(3):
        update(policy, batch)
    assert not reads, f"host reads during {type(policy).__name__} updates: {dict(reads)}"


def test_a_non_finite_loss_off_the_host_skips_its_step_and_is_raised_at_the_next_update(device_path):
    """The fused Adam skips the step whose loss was NaN (its ``found_inf``), so the parameters stay the last
    finite ones, and the error comes one update late, naming the update."""
    _, update = device_path
    torch.manual_seed(0)
    policy, transitions = _dqn()
    update(policy, make_batch(transitions))
    before = [p.detach().clone() for p in policy.model.parameters()]
    steps_before = [s["step"].clone() for s in policy.optimizer_step.optimizer.state.values()]
    transitions["reward"] = torch.full((8,), float("nan"))
    update(policy, make_batch(transitions))  # no error yet: the device has not been asked
    assert all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))
    assert all(torch.equal(a, s["step"]) for a, s in zip(steps_before, policy.optimizer_step.optimizer.state.values()))
    with pytest.raises(NonFiniteLossError, match="at update 1, seen one update later"):
        update(policy, make_batch(transitions))
