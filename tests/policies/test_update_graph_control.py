"""What ``GraphedUpdates`` does around its CUDA graphs (policies/update_graph.py), on the CPU: warm-ups, one
capture per phase, replays, a recapture when what the graph binds moved, a refusal or a failure and the updates
counted. CI has no GPU, so ``torch.cuda``'s streams and graphs are stand-ins here (``FakeCuda``): a capture runs
the program and then puts back everything it changed (a real capture records kernels without running them), and
a replay runs the recorded program again into the captured outputs. The program's own arithmetic against eager
is tests/policies/test_update_graph.py's; the real capture is tests/gpu/test_update_graph_cuda.py's.
"""
from __future__ import annotations

import contextlib
import copy
import logging

import pytest
import torch

import data.replay.device
import policies.base
import policies.optim
from data.batch import make_batch
from policies.update_graph import GraphedUpdates

from test_update_graph import OBS, _assert_same, _buffer, _continuous_buffer, _policy, _state


class _Stream:
    def wait_stream(self, other):
        pass


class _Graph:
    """A captured program: ``replay`` runs it again and writes what it returns into the captured outputs."""

    def __init__(self):
        self.rerun = None
        self.outputs = None
        self.replays = 0

    def replay(self):
        self.replays += 1
        fresh = self.rerun()
        for key, value in self.outputs.items():
            value.copy_(fresh[key])


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's streams and graphs as stand-ins, and the device path on CPU tensors."""
    monkeypatch.setattr(policies.optim, "host_path", lambda device: False)
    monkeypatch.setattr(data.replay.device, "host_path", lambda device: False)
    monkeypatch.setattr(policies.base, "capture_refusal", lambda policy, buffer: None)  # a CPU learner, as if CUDA
    for name, value in dict(Stream=lambda *a: _Stream(), current_stream=lambda *a: _Stream(),
                            stream=lambda s: contextlib.nullcontext(), device=lambda d: contextlib.nullcontext(),
                            set_stream=lambda s: None, CUDAGraph=_Graph, get_sync_debug_mode=lambda: 0,
                            set_sync_debug_mode=lambda mode: None,
                            graph=lambda g, **kw: contextlib.nullcontext()).items():
        monkeypatch.setattr(torch.cuda, name, value, raising=False)
    original = GraphedUpdates._capture

    def capture(self, phase):
        bound = self.bound_tensors()
        saved = [t.detach().clone() for t in bound]
        with torch.random.fork_rng(devices=[]):
            original(self, phase)  # runs the program: what it changed is put back, as a real capture changes nothing
        for t, before in zip(bound, saved):
            t.data.copy_(before)
        graph, outputs = self._graphs[phase]
        graph.rerun, graph.outputs = self._program, outputs

    monkeypatch.setattr(GraphedUpdates, "_capture", capture)


def _eager_on(eager, buffer, index, priority=False):
    for idx in index:
        weight = buffer.sampler.importance_weights(idx) if priority else torch.ones(len(idx))
        out = eager.learn_mode.forward(make_batch(dict(buffer.storage.gather(idx), index=idx, weight=weight)))
        if priority:
            buffer.update_priority(idx, out["priority"])


@pytest.mark.parametrize("priority", [False, True])
def test_two_warm_ups_one_capture_then_replays_make_eagers_updates(fake_cuda, priority):
    policy = _policy(priority=priority, priority_IS_weight=priority)
    eager = copy.deepcopy(policy)
    buffer = _buffer(priority)
    eager_buffer = copy.deepcopy(buffer)
    program = policy.update_program(buffer, batch_size=8, updates=3, priority=priority)
    for call in range(6):
        out = program.run()
        assert program.failed is None
        assert program.captures == (0 if call < 2 else 1)
        _eager_on(eager, eager_buffer, out["index"].clone(), priority)
    assert program._graphs[0][0].replays == 4  # the capture's call replays too: the capture itself ran nothing
    assert policy.optimizer_step.updates == eager.optimizer_step.updates == 18
    _assert_same(_state(policy), _state(eager))
    if priority:
        _assert_same(buffer.sampler.state_dict(), eager_buffer.sampler.state_dict())


def test_a_load_warms_up_and_captures_again_unless_now_refused(fake_cuda, monkeypatch, caplog):
    policy = _policy()
    program = policy.update_program(_buffer(False), batch_size=8, updates=2)
    for _ in range(3):
        program.run()
    assert program.captures == 1
    policy.load_state_dict(copy.deepcopy(policy.state_dict()))  # Adam's state is new memory
    program.run()
    program.run()
    assert program.captures == 1 and not program._graphs  # warming up again
    program.run()
    assert program.captures == 2
    policy.load_state_dict(copy.deepcopy(policy.state_dict()))
    monkeypatch.setattr(program, "_refusal", lambda: "its optimizer is not the fused Adam (a test's reason)")
    program.run()
    program.run()
    with caplog.at_level(logging.WARNING):
        assert program.run() == {} and program.made == 0
    assert "cannot capture DQNPolicy's update in one CUDA graph: its optimizer is not the fused Adam" in caplog.text
    with pytest.raises(RuntimeError, match="capture failed"):
        program.run()  # final: the learner runs its updates itself from now on


def test_a_warm_up_that_fails_counts_the_updates_it_made(fake_cuda, caplog):
    policy = _policy()
    program = policy.update_program(_buffer(False), batch_size=8, updates=3)
    update_fn, calls = program._update_fn, []

    def failing(batch, count, number):
        calls.append(number)
        if len(calls) == 2:
            raise RuntimeError("an op torch cannot run here")
        return update_fn(batch, count, number)

    program._update_fn = failing
    with caplog.at_level(logging.WARNING):
        assert program.run() == {}
    assert program.made == 1 and policy.optimizer_step.updates == 1
    assert "the capture failed (RuntimeError: an op torch cannot run here)" in caplog.text


def test_td3_captures_one_graph_per_phase_of_its_actor_delay(fake_cuda):
    import gymnasium as gym
    import numpy as np
    from easydict import EasyDict

    from engine.config import deep_merge
    from policies.td3 import TD3Policy

    torch.manual_seed(0)
    cfg = deep_merge(TD3Policy.default_config(), dict(model=dict(actor_head_hidden_size_list=[16],
                                                                 critic_head_hidden_size_list=[16]),
                                                      learn=dict(policy_noise=0.0)))
    policy = TD3Policy(EasyDict(cfg), OBS, gym.spaces.Box(-2, 2, (2,), np.float32))
    eager = copy.deepcopy(policy)
    buffer = _continuous_buffer(False)
    program = policy.update_program(buffer, batch_size=8, updates=1)  # one update a call: the phases alternate
    for _ in range(8):
        out = program.run()
        _eager_on(eager, buffer, out["index"].clone())
    assert program.captures == 2 and sorted(program._graphs) == [0, 1]
    _assert_same(_state(policy), _state(eager))
    # the critic-only graph reports the actor's statistics from the memory the actor phase's graph writes (a
    # stand-in replay copies fresh values into the outputs, so the check is of where the outputs point)
    kept = policy._last_actor_stats["actor_loss"]
    assert program._graphs[0][1]["actor_loss"].data_ptr() == kept.data_ptr()
