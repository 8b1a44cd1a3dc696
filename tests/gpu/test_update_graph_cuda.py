"""``policy.compile='cudagraph_update'`` on a GPU (``pytest -m gpu``; skipped without CUDA): DQN's whole
updates (and TD3's, both phases of its actor delay, and SAC's) captured in one CUDA graph
(policies/update_graph.py) give eager's updates on the slots the graph drew, a loaded checkpoint is captured
again, a NaN loss is skipped on the device and named at a later call, and the rows a frame-stack storage cannot
rebuild are drawn again inside the graph. tests/policies/test_update_graph.py runs the same program on the CPU;
tests/gpu/test_update_graph_training.py trains through the graph.
"""
from __future__ import annotations

import copy

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(150),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run with pytest -m gpu on a GPU)")]

FRAMES, ACTIONS = (4, 84, 84), 6


@pytest.fixture(autouse=True)
def full_fp32(monkeypatch):
    """Full fp32, and one convolution algorithm whatever the GPU's free memory: cuDNN picks by the workspace it
    can get, and another algorithm rounds otherwise (the suite runs these tests 4 processes to a GPU)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)


def _policy(compile_mode, **overrides):
    """A DQN with the Nature CNN on Pong's frame stacks, learning on cuda."""
    import gymnasium as gym
    import numpy as np
    from easydict import EasyDict

    from engine.config import deep_merge
    from policies import DQNPolicy

    torch.manual_seed(0)
    cfg = EasyDict(deep_merge(deep_merge(DQNPolicy.default_config(), dict(
        cuda=True, compile=compile_mode, model=dict(encoder_hidden_size_list=[512]),
        learn=dict(learning_rate=1e-4, target_update_freq=3))), overrides))
    return DQNPolicy(cfg, gym.spaces.Box(0, 255, FRAMES, np.uint8), gym.spaces.Discrete(ACTIONS))


def _buffer(priority, n=200, nan_reward=False):
    from data.batch import make_batch
    from data.replay import PrioritizedSampler, ReplayBuffer

    device = torch.device("cuda", torch.cuda.current_device())
    sampler = PrioritizedSampler(256, device=device) if priority else None
    buffer = ReplayBuffer(256, sampler=sampler, device=device)
    g = torch.Generator().manual_seed(1)
    frames = lambda: torch.randint(0, 256, (n, *FRAMES), generator=g, dtype=torch.uint8)  # noqa: E731
    reward = torch.full((n,), float("nan")) if nan_reward else torch.randn(n, generator=g)
    buffer.push(make_batch(dict(obs=frames(), next_obs=frames(), action=torch.randint(0, ACTIONS, (n,), generator=g),
                                reward=reward, terminated=torch.rand(n, generator=g) < 0.1,
                                truncated=torch.zeros(n, dtype=torch.bool), discount=torch.full((n,), 0.99))))
    return buffer


def _eager_updates(policy, buffer, index, priority):
    from data.batch import make_batch

    losses = []
    for idx in index:
        weight = buffer.sampler.importance_weights(idx) if priority else torch.ones(len(idx), device=idx.device)
        out = policy.learn_mode.forward(make_batch(dict(buffer.storage.gather(idx), index=idx, weight=weight)))
        if priority:
            buffer.update_priority(idx, out["priority"])
        losses.append(out["loss"])
    return torch.stack(losses)


@pytest.mark.parametrize("priority", [False, True])
def test_captured_dqn_updates_equal_eager_on_the_slots_the_graph_drew(priority):
    from torch._dynamo.utils import counters

    graphs_before = counters["stats"]["unique_graphs"]
    graphed_policy = _policy("cudagraph_update", priority=priority, priority_IS_weight=priority)
    eager = _policy("none", priority=priority, priority_IS_weight=priority)
    eager.load_state_dict(copy.deepcopy(graphed_policy.state_dict()))
    buffer = _buffer(priority)
    eager_buffer = copy.deepcopy(buffer)
    graphed = graphed_policy.learn_mode.graphed_updates(buffer, 32, 4, priority)
    assert graphed is not None
    initial = {k: v.clone() for k, v in eager.model.state_dict().items()}
    for _ in range(6):  # two warm-up calls, the capture, three replays
        out = graphed.run()
        assert graphed.failed is None, graphed.failed
        losses = out["loss"].clone()
        eager_losses = _eager_updates(eager, eager_buffer, out["index"].clone(), priority)
        torch.testing.assert_close(losses, eager_losses, rtol=1e-3, atol=1e-5)
    torch.cuda.synchronize()
    assert graphed.captures == 1
    loss_path = graphed_policy.hot_paths[("learn", "loss")]
    assert loss_path.mode == "compile" and loss_path.fallback_error is None, loss_path  # compiled inside the graph
    assert counters["stats"]["unique_graphs"] > graphs_before  # dynamo compiled it (not skipped as it would be
    # when first met under a dispatch mode: policies.update_graph.WARMUP_CALLS)
    assert graphed_policy.optimizer_step.updates == eager.optimizer_step.updates == 24
    # Adam divides each step by the root of its second moment, so the compiled loss's rounding (equal losses to
    # 1e-3 above) moves a weight with a gradient near 0 by a whole step the eager one does not: after 24 updates
    # the parameters part by 2.2% of their movement on the H200 under 4 test processes (a wrong update, one
    # skipped or made twice, parts them by about 100%)
    for key, value in graphed_policy.model.state_dict().items():
        moved = (eager.model.state_dict()[key] - initial[key]).norm()
        assert (value - eager.model.state_dict()[key]).norm() <= 0.05 * moved + 1e-6, key
    for key, value in graphed_policy._target_model.state_dict().items():  # the hard copy at update 24
        torch.testing.assert_close(value, graphed_policy.model.state_dict()[key])


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_captured_two_step_updates_equal_eager(algo, monkeypatch):
    """TD3's actor step and every SAC update are two optimizer steps in one graph (the critics', then the actor's
    through the critics just stepped), and each phase of TD3's delay is a graph of its own: replayed, they give
    eager's updates on the slots they drew. The noise the graph draws is taken out of the comparison: TD3's
    smoothing noise is 0, SAC's samples are the Gaussian's mean (``randn_like`` gives zeros)."""
    import gymnasium as gym
    import numpy as np
    from easydict import EasyDict

    from data.batch import make_batch
    from data.replay import ReplayBuffer
    from engine.config import deep_merge
    from policies.sac import SACPolicy
    from policies.td3 import TD3Policy

    cls, learn = (TD3Policy, dict(policy_noise=0.0)) if algo == "td3" else (SACPolicy, {})
    if algo == "sac":
        monkeypatch.setattr(torch, "randn_like", torch.zeros_like)

    def build(mode):
        torch.manual_seed(0)
        cfg = deep_merge(cls.default_config(), dict(
            cuda=True, compile=mode, learn=learn,
            model=dict(actor_head_hidden_size_list=[64, 64], critic_head_hidden_size_list=[64, 64])))
        return cls(EasyDict(cfg), gym.spaces.Box(-1, 1, (5,), np.float32), gym.spaces.Box(-2, 2, (2,), np.float32))

    graphed_policy, eager = build("cudagraph_update"), build("none")
    eager.load_state_dict(copy.deepcopy(graphed_policy.state_dict()))
    initial = {k: v.clone() for k, v in eager.model.state_dict().items()}
    buffer = ReplayBuffer(256, device=torch.device("cuda", torch.cuda.current_device()))
    g, n = torch.Generator().manual_seed(1), 200
    buffer.push(make_batch(dict(obs=torch.randn(n, 5, generator=g), next_obs=torch.randn(n, 5, generator=g),
                                action=torch.rand(n, 2, generator=g) * 4 - 2, reward=torch.randn(n, generator=g),
                                terminated=torch.rand(n, generator=g) < 0.1, truncated=torch.zeros(n, dtype=torch.bool),
                                discount=torch.full((n,), 0.99))))
    eager_buffer = copy.deepcopy(buffer)
    graphed = graphed_policy.learn_mode.graphed_updates(buffer, 32, 1)  # one update a call: TD3's phases alternate
    assert graphed is not None
    for _ in range(10):  # per phase: two warm-up calls, the capture, replays
        out = graphed.run()
        assert graphed.failed is None, graphed.failed
        eager_losses = _eager_updates(eager, eager_buffer, out["index"].clone(), False)
        torch.testing.assert_close(out["loss"].clone(), eager_losses, rtol=1e-3, atol=1e-5)
    torch.cuda.synchronize()
    assert graphed.captures == (2 if algo == "td3" else 1)
    assert graphed_policy.optimizer_step.updates == eager.optimizer_step.updates == 10
    for key, value in graphed_policy.model.state_dict().items():
        moved = (eager.model.state_dict()[key] - initial[key]).norm()
        assert (value - eager.model.state_dict()[key]).norm() <= 0.02 * moved + 1e-6, key
    target = "_target_model" if algo == "td3" else "_target_critic"
    for key, value in getattr(graphed_policy, target).state_dict().items():  # TD3's: moved on actor steps alone
        eager_value = getattr(eager, target).state_dict()[key]
        moved = (eager_value - initial[key if algo == "td3" else f"critic.{key}"]).norm()
        assert moved > 0 and (value - eager_value).norm() <= 0.02 * moved + 1e-6, key
    for name in ("loss", "actor_loss"):  # both passes compiled inside the graphs
        path = graphed_policy.hot_paths[("learn", name)]
        assert path.mode == "compile" and path.fallback_error is None, path


def test_a_loaded_checkpoint_is_captured_again_and_trained_from():
    policy = _policy("cudagraph_update")
    buffer = _buffer(False)
    graphed = policy.learn_mode.graphed_updates(buffer, 32, 2)
    for _ in range(4):
        graphed.run()
    state = copy.deepcopy(policy.state_dict())
    policy.load_state_dict(state)  # Adam's state tensors are new memory: the graph must not write the old
    graphed.run()      # warm-up calls again ...
    graphed.run()
    graphed.run()      # ... and the second capture
    torch.cuda.synchronize()
    assert graphed.captures == 2 and policy.optimizer_step.updates == 14
    steps = [s["step"] for s in policy.optimizer_step.optimizer.state.values()]
    assert all(float(s) == 14 for s in steps)  # the loaded state is the one the new graph steps


def test_a_nan_loss_is_skipped_in_the_graph_and_named_one_call_later():
    from policies import NonFiniteLossError

    policy = _policy("cudagraph_update")
    graphed = policy.learn_mode.graphed_updates(_buffer(False, nan_reward=True), 32, 2)
    before = [p.detach().clone() for p in policy.model.parameters()]
    graphed.run()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))
    with pytest.raises(NonFiniteLossError, match="not finite"):
        graphed.run()


def test_captured_updates_from_frame_stacks_equal_eager():
    """Pong's replay (frame stacks on the GPU): the rows the storage cannot rebuild are drawn again inside the
    graph, and the updates equal eager's on the rows drawn."""
    from data.batch import make_batch
    from data.replay import FrameStackStorage, ReplayBuffer

    device = torch.device("cuda", torch.cuda.current_device())
    envs, steps, capacity = 4, 120, 400
    g = torch.Generator().manual_seed(2)
    frames = torch.randint(1, 256, (steps + 4, envs, 84, 84), generator=g, dtype=torch.uint8)
    stack = lambda t: frames[t:t + 4].transpose(0, 1)  # noqa: E731
    buffer = ReplayBuffer(capacity, storage=FrameStackStorage(capacity, envs, 4, device=device), device=device)
    for t in range(0, steps, 4):
        ts = range(t, t + 4)
        n = 4 * envs
        buffer.push(make_batch(dict(
            obs=torch.cat([stack(u) for u in ts]), next_obs=torch.cat([stack(u + 1) for u in ts]),
            action=torch.randint(0, ACTIONS, (n,), generator=g), reward=torch.randn(n, generator=g),
            terminated=torch.zeros(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
            discount=torch.full((n,), 0.99), span=torch.ones(n, dtype=torch.int64))))
    graphed_policy, eager = _policy("cudagraph_update"), _policy("none")
    eager.load_state_dict(copy.deepcopy(graphed_policy.state_dict()))
    eager_buffer = copy.deepcopy(buffer)
    graphed = graphed_policy.learn_mode.graphed_updates(buffer, 32, 4)
    assert graphed is not None
    for _ in range(5):
        out = graphed.run()
        assert graphed.failed is None, graphed.failed
        index = out["index"].clone()
        assert buffer.storage.sampleable(index.flatten()).all()
        torch.testing.assert_close(out["loss"].clone(), _eager_updates(eager, eager_buffer, index, False),
                                   rtol=1e-3, atol=1e-5)
    assert graphed.captures == 1
