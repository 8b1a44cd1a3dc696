"""``policy.compile='cudagraph_update'`` (policies/update_graph.py) on the CPU.

CI has no GPU, so what a CUDA graph would replay is run here as the same program, eagerly
(``update_program(..., capture=False)``), on the replay's device path (``data.replay.device.host_path``
patched to False: the sum tree in torch ops, as on a GPU), and checked for what capture needs and what
eager gives:

- the program's updates equal the eager learner's on the same slots (parameters, target network, Adam's
  moments, update count, priorities), over hard and soft target updates and every Q head;
- nothing in it reads a device value on the host (it runs under ``no_host_sync``, which raises on such an op);
- what cannot be captured is refused by name, and the learner then runs its updates one by one;
- the learner through the program trains and counts as through its forward.

tests/gpu/test_cuda.py captures the same program on a GPU and compares it with eager there.
"""
from __future__ import annotations

import copy
import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

import data.replay.device
import policies.optim
from data.batch import make_batch
from data.replay import PrioritizedSampler, ReplayBuffer
from data.replay.frame_storage import FrameStackStorage
from data.replay.sequence_storage import SequenceStorage
from engine.config import deep_merge
from engine.context import OnlineRLContext
from middleware import OffPolicyLearner
from policies import DQNPolicy
from policies import update_graph
from policies.update_graph import HostSyncError, capture_refusal, no_host_sync

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Discrete(3)
CAPACITY = 64


@pytest.fixture
def device_path(monkeypatch):
    """The replay's and the optimizer's device paths on CPU tensors (as on a GPU)."""
    monkeypatch.setattr(policies.optim, "host_path", lambda device: False)
    monkeypatch.setattr(data.replay.device, "host_path", lambda device: False)


def _policy(**overrides) -> DQNPolicy:
    torch.manual_seed(0)
    base = deep_merge(DQNPolicy.default_config(), dict(model=dict(encoder_hidden_size_list=[16, 16]),
                                                       learn=dict(target_update_freq=2)))
    cfg = EasyDict(deep_merge(base, overrides))
    return DQNPolicy(cfg, OBS, ACT)


def _buffer(priority: bool) -> ReplayBuffer:
    sampler = PrioritizedSampler(CAPACITY, alpha=0.6, beta=0.4) if priority else None
    buffer = ReplayBuffer(CAPACITY, sampler=sampler)
    g = torch.Generator().manual_seed(1)
    n = 40
    buffer.push(make_batch(dict(
        obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g),
        action=torch.randint(0, 3, (n,), generator=g), reward=torch.randn(n, generator=g),
        terminated=torch.rand(n, generator=g) < 0.2, truncated=torch.zeros(n, dtype=torch.bool),
        discount=torch.full((n,), 0.99))))
    return buffer


def _state(policy: DQNPolicy) -> dict:
    state = policy.state_dict()
    return {"model": state["model"], "target": state["target_model"], "updates": state["updates"],
            "adam": {k: v for i, s in state["optimizer"]["state"].items() for k, v in s.items() for k in [f"{i}.{k}"]}}


def _assert_same(a, b, path=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=lambda m: f"{path}: {m}")
    else:
        assert a == b, path


CASES = {
    "hard target, uniform": dict(),
    "soft target, no double Q": dict(learn=dict(target_theta=0.05, double_q=False)),
    "prioritized, weighted, clipped": dict(priority=True, priority_IS_weight=True, learn=dict(grad_clip_norm=0.5)),
    "categorical head": dict(model=dict(distribution="categorical", n_atoms=11)),
    "quantile head, prioritized": dict(priority=True, model=dict(distribution="quantile", n_atoms=8)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_program_equals_eager_updates_on_the_same_slots(device_path, case):
    overrides = CASES[case]
    priority = bool(overrides.get("priority"))
    policy = _policy(**overrides)
    eager = copy.deepcopy(policy)
    buffer = _buffer(priority)
    eager_buffer = copy.deepcopy(buffer)
    program = policy.update_program(buffer, batch_size=8, updates=3, priority=priority, capture=False)
    for _ in range(3):  # 9 updates: hard target copies at 2, 4, 6, 8, inside and across runs
        out = program.run()
        for j, idx in enumerate(out["index"]):
            weight = (eager_buffer.sampler.importance_weights(idx) if priority else torch.ones(len(idx)))
            batch = make_batch(dict(eager_buffer.storage.gather(idx), index=idx, weight=weight))
            stats = eager.learn_mode.forward(batch)
            if priority:
                eager_buffer.update_priority(idx, stats["priority"])
            torch.testing.assert_close(out["loss"][j], stats["loss"].float(), rtol=1e-6, atol=1e-7)
    _assert_same(_state(policy), _state(eager))
    assert policy.optimizer_step.updates == 9
    if priority:
        _assert_same(buffer.sampler.state_dict(), eager_buffer.sampler.state_dict())


# ---- frame stacks: rows the storage cannot rebuild are drawn again on the device -----------------------------
FRAMES, ENVS, STACK = (36, 36), 2, 2


def _frame_buffer(priority: bool, steps: int = 110, capacity: int = 200) -> ReplayBuffer:
    """``steps`` vector steps of ``ENVS`` envs pushed as a collector pushes them (time-major, whole steps, n-step 1)
    into a frame-stack storage smaller than what is pushed: the ring wraps, and the newest steps (no next
    step yet) and the first ones (no history) cannot be rebuilt."""
    g = torch.Generator().manual_seed(2)
    frames = torch.randint(1, 256, (steps + STACK, ENVS, *FRAMES), generator=g, dtype=torch.uint8)
    stack = lambda t: frames[t:t + STACK].transpose(0, 1)  # noqa: E731  [ENVS, STACK, H, W] at step t
    storage = FrameStackStorage(capacity, ENVS, STACK)
    sampler = PrioritizedSampler(capacity) if priority else None
    buffer = ReplayBuffer(capacity, sampler=sampler, storage=storage)
    for t in range(0, steps, 3):  # pushes of 3 vector steps
        ts = range(t, min(t + 3, steps))
        n = len(ts) * ENVS
        buffer.push(make_batch(dict(
            obs=torch.cat([stack(u) for u in ts]), next_obs=torch.cat([stack(u + 1) for u in ts]),
            action=torch.randint(0, 3, (n,), generator=g), reward=torch.randn(n, generator=g),
            terminated=torch.zeros(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
            discount=torch.full((n,), 0.99), span=torch.ones(n, dtype=torch.int64))))
    return buffer


def _image_policy(**overrides) -> DQNPolicy:
    torch.manual_seed(0)
    base = deep_merge(DQNPolicy.default_config(), dict(model=dict(encoder_hidden_size_list=[32]),
                                                       learn=dict(target_update_freq=2)))
    return DQNPolicy(EasyDict(deep_merge(base, overrides)), gym.spaces.Box(0, 255, (STACK, *FRAMES), np.uint8), ACT)


@pytest.mark.parametrize("priority", [False, True])
def test_frame_stacks_are_drawn_again_on_the_device_and_equal_eager(device_path, priority):
    policy = _image_policy(priority=priority)
    eager = copy.deepcopy(policy)
    buffer = _frame_buffer(priority)
    whole = buffer.storage.sampleable(torch.arange(len(buffer)))
    assert 0 < (~whole).sum() < len(buffer) // 10  # some slots wait for a next step or lack their history
    eager_buffer = copy.deepcopy(buffer)
    program = policy.update_program(buffer, batch_size=16, updates=2, priority=priority, capture=False)
    for _ in range(3):
        out = program.run()
        for idx in out["index"]:
            assert buffer.storage.sampleable(idx).all()  # every row drawn again until whole
            weight = eager_buffer.sampler.importance_weights(idx) if priority else torch.ones(len(idx))
            stats = eager.learn_mode.forward(make_batch(dict(eager_buffer.storage.gather(idx), index=idx,
                                                             weight=weight)))
            if priority:
                eager_buffer.update_priority(idx, stats["priority"])
    _assert_same(_state(policy), _state(eager))
    if priority:
        _assert_same(buffer.sampler.state_dict(), eager_buffer.sampler.state_dict())


def test_rows_never_whole_move_nothing_and_keep_their_priority(device_path, monkeypatch):
    """Where the redraws find no whole slot (forced here: none is), every row has weight 0: no gradient reaches
    the network, and no priority changes."""
    policy = _image_policy(priority=True)
    buffer = _frame_buffer(True)
    monkeypatch.setattr(buffer.storage, "sampleable", lambda idx: torch.zeros(len(idx), dtype=torch.bool))
    before_tree = buffer.sampler.state_dict()["tree"]["sum"].clone()
    program = policy.update_program(buffer, batch_size=8, updates=1, priority=True, capture=False)
    out = program.run()
    assert float(out["loss"][0]) == 0.0
    assert torch.equal(buffer.sampler.state_dict()["tree"]["sum"], before_tree)
    assert all(float(p.grad.abs().sum()) == 0 for p in policy.model.parameters() if p.grad is not None)


def test_the_program_reads_nothing_on_the_host(device_path):
    """Every run after the first (which ``run`` itself guards) also passes the guard, priorities and all."""
    policy = _policy(priority=True, priority_IS_weight=True, learn=dict(grad_clip_norm=1.0))
    program = policy.update_program(_buffer(True), batch_size=8, updates=2, priority=True, capture=False)
    program.run()
    with no_host_sync("the test's update"):
        out = program._program()
    assert out["loss"].shape == (2,)


@pytest.mark.parametrize("read", [lambda t: t.sum().item(), lambda t: bool(t.any()), lambda t: t.nonzero(),
                                  lambda t: t[t > 0], lambda t: float(t.max()),
                                  lambda t: t.index_put_((t > 0,), torch.tensor([1.0]))])
def test_no_host_sync_names_each_host_read(read):
    with pytest.raises(HostSyncError, match="CUDA graph cannot capture"):
        with no_host_sync("a read"):
            read(torch.randn(5))


def test_a_non_finite_loss_skips_the_step_and_is_named_one_run_late(device_path):
    policy = _policy()
    program = policy.update_program(_buffer(False), batch_size=8, updates=2, capture=False)
    before = copy.deepcopy(policy.model.state_dict())
    with torch.no_grad():
        next(policy._target_model.parameters()).fill_(float("nan"))  # every target, so every loss, is NaN
    program.run()   # the flag, read at the next run's report (as on a GPU: no wait)
    _assert_same(policy.model.state_dict(), before)
    with pytest.raises(policies.NonFiniteLossError, match="updates 0-1"):
        program.run()


def test_off_cuda_a_pipeline_says_so_and_trains_eagerly(tmp_path, caplog):
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
    from pipelines import serial_pipeline

    main = copy.deepcopy(main_config)
    main.policy.compile = "cudagraph_update"
    main.log = dict(progress=False)
    with caplog.at_level(logging.WARNING):
        summary = serial_pipeline((main, copy.deepcopy(create_config)), max_env_step=600,
                                  exp_name=str(tmp_path / "exp"))
    assert "policy.compile='cudagraph_update' needs a CUDA device" in caplog.text
    assert summary["env_step"] >= 600 and summary["train_iter"] > 0


def test_an_algorithm_without_a_graph_safe_update_says_so_at_start(caplog):
    from policies import PPOPolicy

    cfg = EasyDict(deep_merge(PPOPolicy.default_config(), dict(compile="cudagraph_update")))
    with caplog.at_level(logging.WARNING):
        PPOPolicy(cfg, OBS, ACT)
    assert "cannot capture PPOPolicy's update" in caplog.text and "no graph-safe update" in caplog.text


def test_a_subclass_with_its_own_update_is_not_captured_with_its_parents(caplog):
    class MyDQN(DQNPolicy):
        def _forward_learn(self, batch):
            return super()._forward_learn(batch)

    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(compile="cudagraph_update")))
    with caplog.at_level(logging.WARNING):
        policy = MyDQN(cfg, OBS, ACT)
    assert "MyDQN writes its own _forward_learn" in caplog.text
    assert policy.graphed_updates(_buffer(False), 8, 1) is None


# ---- SAC ----------------------------------------------------------------------------------------------------
def _sac(**overrides):
    from policies import SACPolicy

    torch.manual_seed(0)
    base = deep_merge(SACPolicy.default_config(), dict(model=dict(actor_head_hidden_size_list=[16],
                                                                  critic_head_hidden_size_list=[16])))
    return SACPolicy(EasyDict(deep_merge(base, overrides)), OBS, gym.spaces.Box(-2, 2, (2,), np.float32))


def _continuous_buffer(priority: bool) -> ReplayBuffer:
    buffer = _buffer(priority)
    g = torch.Generator().manual_seed(3)
    buffer.storage.fields["action"] = torch.rand(CAPACITY, 2, generator=g) * 4 - 2
    return buffer


@pytest.mark.parametrize("overrides", [dict(), dict(priority=True, priority_IS_weight=True, learn=dict(auto_alpha=False))])
def test_sac_program_equals_eager_on_the_same_slots(device_path, monkeypatch, overrides):
    """SAC's actor samples from torch's generator in both paths; the program's draws are kept off that stream
    (forked) so both see the same noise."""
    priority = bool(overrides.get("priority"))
    policy = _sac(**overrides)
    eager = copy.deepcopy(policy)
    buffer = _continuous_buffer(priority)
    eager_buffer = copy.deepcopy(buffer)
    draw = buffer.sampler.draw

    def forked_draw(*args):
        with torch.random.fork_rng(devices=[]):
            return draw(*args)

    monkeypatch.setattr(buffer.sampler, "draw", forked_draw)
    program = policy.update_program(buffer, batch_size=8, updates=3, priority=priority, capture=False)
    torch.manual_seed(5)
    runs = [program.run() for _ in range(2)]
    torch.manual_seed(5)
    for out in runs:
        for j, idx in enumerate(out["index"]):
            weight = eager_buffer.sampler.importance_weights(idx) if priority else torch.ones(len(idx))
            stats = eager.learn_mode.forward(make_batch(dict(eager_buffer.storage.gather(idx), index=idx,
                                                             weight=weight)))
            if priority:
                eager_buffer.update_priority(idx, stats["priority"])
            torch.testing.assert_close(out["loss"][j], stats["loss"].float(), rtol=1e-6, atol=1e-7)
    state, eager_state = policy.state_dict(), eager.state_dict()
    _assert_same(state["model"], eager_state["model"])
    _assert_same(state["target_critic"], eager_state["target_critic"])
    assert state["updates"] == eager_state["updates"] == 6
    if priority:
        _assert_same(buffer.sampler.state_dict(), eager_buffer.sampler.state_dict())


@pytest.mark.parametrize("what, setup, named", [
    ("sequences", lambda p, b: setattr(b, "storage", SequenceStorage(CAPACITY, num_envs=1, seq_len=4)),
     "SequenceStorage"),
    ("obs_norm", lambda p, b: setattr(p.normalisation, "obs_norm", object()), "policy.obs_norm"),
    ("replay off the learner", lambda p, b: setattr(b, "device", torch.device("cpu")), "replay_buffer.device='learn'"),
    ("ddp", lambda p, b: setattr(p.hot_paths, "ddp", True), "DDP"),
])
def test_what_cannot_be_captured_is_named(what, setup, named):
    policy, buffer = _policy(), _buffer(False)
    policy.device = buffer.device = torch.device("cuda", 0)  # as on a GPU, to reach the other refusals
    setup(policy, buffer)
    assert named in capture_refusal(policy, buffer)


def test_the_learner_runs_the_program_and_counts_its_updates(device_path, monkeypatch):
    policy = _policy(priority=True)
    buffer = _buffer(True)
    monkeypatch.setattr(policy, "compile_mode", "cudagraph_update")
    monkeypatch.setattr(update_graph.GraphedUpdates, "__init__",
                        _uncaptured(update_graph.GraphedUpdates.__init__))
    monkeypatch.setattr(policies.base, "capture_refusal", lambda policy, buffer: None)
    learner = OffPolicyLearner(policy.learn_mode, buffer, batch_size=8, update_per_collect=3, priority=True)
    ctx = OnlineRLContext()
    before = buffer.sampler.state_dict()["tree"]["sum"].clone()
    learner(ctx)
    learner(ctx)
    assert learner._graphed is not None and ctx.train_iter == 6 and policy.optimizer_step.updates == 6
    assert set(ctx.train_output) >= {"loss", "q_value", "target_q"}
    assert ctx.train_data.obs.shape == (8, 3)
    assert not torch.equal(buffer.sampler.state_dict()["tree"]["sum"], before)  # priorities written back


def _uncaptured(init):
    def build(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.capture = False
    return build


# ---- TD3 and DDPG: the delayed actor step, one graph per phase --------------------------------------------------
@pytest.mark.parametrize("algo", ["td3", "ddpg"])
def test_td3_program_equals_eager_across_the_actor_delay(device_path, algo):
    """3 updates a run with the actor every 2nd: the runs start at phases 0 and 1 in turn, and each phase's
    Python side (which parameters step, whether the targets move) is its own. Without smoothing noise both
    paths draw nothing else."""
    from policies.td3 import DDPGPolicy, TD3Policy

    cls = TD3Policy if algo == "td3" else DDPGPolicy
    torch.manual_seed(0)
    base = deep_merge(cls.default_config(), dict(model=dict(actor_head_hidden_size_list=[16],
                                                            critic_head_hidden_size_list=[16])))
    learn = dict(policy_noise=0.0) if algo == "td3" else {}
    policy = cls(EasyDict(deep_merge(base, dict(learn=learn))), OBS, gym.spaces.Box(-2, 2, (2,), np.float32))
    assert policy.graph_period == (2 if algo == "td3" else 1)
    eager = copy.deepcopy(policy)
    buffer = _continuous_buffer(False)
    program = policy.update_program(buffer, batch_size=8, updates=3, capture=False)
    for _ in range(4):
        out = program.run()
        for j, idx in enumerate(out["index"]):
            stats = eager.learn_mode.forward(make_batch(dict(buffer.storage.gather(idx), index=idx,
                                                             weight=torch.ones(len(idx)))))
            torch.testing.assert_close(out["loss"][j], stats["loss"].float(), rtol=1e-6, atol=1e-7)
    assert sorted(program._warm) == ([0, 1] if algo == "td3" else [0])  # each phase warmed up on its own
    state, eager_state = policy.state_dict(), eager.state_dict()
    _assert_same(state, eager_state)


def test_td3_graph_noise_is_drawn_on_the_device_and_clipped():
    from policies.td3 import TD3Policy

    policy = TD3Policy(EasyDict(TD3Policy.default_config()), OBS, gym.spaces.Box(-2, 2, (2,), np.float32))
    with no_host_sync("the noise"):
        noise = policy._graph_noise(4096, 2)
    assert noise.abs().max() <= policy._noise_clip and noise.std() > 0.5 * policy._policy_noise


# ---- what a capture needs of the optimizer, the tensors it binds, and the guard --------------------------------
class _CapturingStream:
    def is_capturing(self):
        return True


@pytest.mark.skipif(not hasattr(torch, "accelerator"), reason="torch < 2.6 checks a capture through torch.cuda only")
def test_a_captured_step_needs_a_capturable_adam_which_a_checkpoint_load_keeps(device_path, monkeypatch):
    """Adam refuses ``step()`` inside a capture unless its groups are capturable (checked here by faking a
    capturing CUDA stream around the CPU's fused Adam); ``make_capturable`` sets it, and loading a checkpoint of
    a run that was not capturable keeps this run's setting (a load takes the saved groups' keys)."""
    policy = _policy()
    loss = lambda: policy._batch_loss(make_batch(dict(_buffer(False).storage.gather(torch.arange(8)),  # noqa: E731
                                                      weight=torch.ones(8))))[0]
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("cuda"))
    monkeypatch.setattr(torch.accelerator, "current_stream", lambda *a: _CapturingStream())
    with pytest.raises(RuntimeError, match="capturable is False"):
        policy.optimizer_step.graph_step(loss())
    uncapturable = _policy().state_dict()
    policy.optimizer_step.make_capturable()
    policy.load_state_dict(uncapturable)
    assert all(g["capturable"] for g in policy.optimizer_step.optimizer.param_groups)
    policy.optimizer_step.graph_step(loss())  # no refusal now


def test_a_checkpoint_load_moves_what_the_graph_binds(device_path):
    """Adam's state is new memory after a load: the fingerprint ``_run_graphed`` compares changes, so a GPU run
    captures again rather than stepping the old state."""
    policy = _policy()
    program = policy.update_program(_buffer(False), batch_size=8, updates=2, capture=False)
    program.run()
    before = program._fingerprint()
    assert program._fingerprint() == before
    policy.load_state_dict(copy.deepcopy(policy.state_dict()))
    assert program._fingerprint() != before


def test_the_fingerprint_sees_every_parameter_and_one_put_in_its_place(device_path):
    """``module_tensors`` (the fingerprint's flat walk) lists what ``parameters()`` and ``buffers()`` list, and a
    parameter replaced (``param.data = ...``) or a submodule swapped after the capture changes the fingerprint."""
    from policies.update_graph import module_tensors

    policy = _policy()
    for _, attr in policy._checkpointed:
        module = getattr(policy, attr)
        assert {id(t) for t in module_tensors(module)} == {id(t) for t in [*module.parameters(), *module.buffers()]}
    program = policy.update_program(_buffer(False), batch_size=8, updates=2, capture=False)
    program.run()
    before = program._fingerprint()
    weight = next(policy.model.parameters())
    weight.data = weight.data.clone()
    assert program._fingerprint() != before
    before = program._fingerprint()
    name, child = next(iter(policy.model.named_children()))
    setattr(policy.model, name, copy.deepcopy(child))
    assert program._fingerprint() != before


def test_the_guard_names_a_host_tensor_copied_to_a_device():
    with pytest.raises(HostSyncError, match="copies between the host and the device"):
        with no_host_sync("a copy"):
            torch.ones(3).to("meta")
    with pytest.raises(HostSyncError, match="copies between the host and the device"):
        with no_host_sync("a copy back"):
            torch.ones(3, device="meta").to("cpu")
    with no_host_sync("a scalar"):
        torch.ones(3, device="meta") * torch.tensor(2.0)  # a 0-d host tensor is a scalar argument: allowed


def test_frame_stacks_are_refused_for_an_update_that_cannot_leave_rows_out():
    policy, buffer = _sac(), _buffer(False)
    policy.device = buffer.device = torch.device("cuda", 0)
    buffer.storage = FrameStackStorage(CAPACITY, num_envs=1, frame_stack=2)
    assert "SACPolicy's update cannot leave out the rows" in capture_refusal(policy, buffer)


def test_a_loaded_adam_keeps_its_steps_where_this_run_steps_them():
    """A checkpoint of a host-stepping Adam (foreach, not fused: its step counts on the host) loaded into a fused
    one: the counts move to the parameters' device, where the fused kernel reads them (and back the other way)."""
    policy = _policy()
    fused = policy.optimizer_step.optimizer
    assert fused.defaults.get("fused")
    foreach = torch.optim.Adam(policy.model.parameters(), foreach=True)
    policy.model(torch.zeros(2, 3)).sum().backward()
    foreach.step()
    state = dict(optimizer=foreach.state_dict(), updates=1)
    policy.optimizer_step.load_state_dict(state)
    assert all(g["fused"] for g in fused.param_groups)
    for p in policy.model.parameters():
        step = fused.state[p]["step"]
        assert step.device == p.device and step.dtype == torch.float32 and float(step) == 1.0
