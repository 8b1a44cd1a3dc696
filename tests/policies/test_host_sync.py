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
from policies.td3 import TD3Policy

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


def _td3():
    """TD3: its critics' step, then on every 2nd update the actor's (both checked off the host)."""
    cfg = EasyDict(deep_merge(TD3Policy.default_config(), dict(
        model=dict(actor_head_hidden_size_list=[16], critic_head_hidden_size_list=[16]))))
    return TD3Policy(cfg, OBS, gym.spaces.Box(-2.0, 2.0, (1,), np.float32)), _transitions(8, torch.rand(8, 1))


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
                if caller.f_code.co_name != "_read_oldest":  # the deferred check's pinned flag (module docstring)
                    reads[f"{_name} at {caller.f_code.co_filename}:{caller.f_lineno}"] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    def update(policy, batch):
        counting[0] = True
        try:
            return policy.learn_mode.forward(batch)
        finally:
            counting[0] = False

    update.counting = counting  # a test may count over more than one update (True while counting)
    return reads, update


@pytest.mark.parametrize("build", [_dqn, _ppo, _sac, _td3], ids=["dqn", "ppo", "sac", "td3"])
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
    with pytest.raises(NonFiniteLossError, match="at update 1, seen on cpu at a later update"):
        update(policy, make_batch(transitions))


@pytest.mark.parametrize("n_sample", [256, 1024])
def test_a_ppo_iteration_on_device_envs_reads_three_times_whatever_its_steps_and_minibatches(device_path, n_sample,
                                                                                          tmp_path):
    """Issue 33's "no host read per step or per minibatch": one iteration of the standard pipeline on batched
    torch envs (collect, GAE, 4 epochs of minibatches) reads back three times, at the ends of the collect (the
    finite check of the chunk, the finished episodes) and of the learner (its statistics, in one copy), for 16
    or 64 vector steps and 4 or 16 minibatches alike."""
    import copy

    from dizoo.classic_control.cartpole.config.cartpole_ppo_torch_config import create_config, main_config
    from pipelines import build_pipeline

    reads, update = device_path
    main = copy.deepcopy(main_config)
    main.policy.collect.n_sample = n_sample
    main.policy.eval.evaluator.eval_freq = 10**9
    main.log = dict(progress=False)
    pipeline = build_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=3 * n_sample,
                              exp_name=str(tmp_path / "run"))
    calls = [0]

    def start(ctx):
        calls[0] += 1
        update.counting[0] = calls[0] == 2  # the second iteration: past every first-time setup

    def stop(ctx):
        update.counting[0] = False

    pipeline.insert_before("collector", start, name="count")
    pipeline.insert_after("learner", stop, name="stop_count")
    pipeline.run()
    assert calls[0] >= 2 and sum(reads.values()) == 3, dict(reads)
