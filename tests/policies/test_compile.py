"""``policy.compile`` / ``policy.amp`` (policies/accel.py): compiled hot paths give eager's numbers, a compile
that cannot be done falls back to eager with one warning instead of ending the run, bf16 stays close to fp32,
state dicts keep their keys, and DDP trains through a compiled learner.

What compiles here: torch.compile's graph capture (dynamo) and the forward/backward split (AOTAutograd), run
by a backend that hands the graphs to eager kernels and counts them (``CountingBackend``: dynamo's
``aot_eager``). TorchInductor's C++ build is left out on purpose: cold, it costs 30-50 s per learner on a
loaded 2-core machine, more than this suite's budget for the whole file; inductor's numbers against eager are
checked on CUDA by tests/gpu/test_cuda.py, and on CPU by the commands in docs/performance.md.
"""
from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from data.batch import make_batch
from engine.config import ConfigError, deep_merge
from policies import A2CPolicy, DQNPolicy, PPOPolicy, SACPolicy
from policies import accel
from policies.accel import HotPath
from policies.base import Policy, PolicyParams
from policies.bc import BCPolicy
from policies.cql import DiscreteCQLPolicy
from policies.td3 import TD3Policy
from policies.continuous_models import TwinQ
from policies.models import ActorCritic, OutputLinear, QNetwork
from policies.td3bc import TD3BCPolicy

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-2, 2, (2,), np.float32)
UPDATES = 5


# ---- helpers ---------------------------------------------------------------------------------------
class CountingBackend:
    """dynamo's ``aot_eager``, counting the forward and backward graphs it is given; ``fail_backward``: the
    backward does not lower (as when inductor cannot build it)."""

    def __init__(self, fail_backward: bool = False) -> None:
        self.forward = self.backward = 0
        self.fail_backward = fail_backward

    def __call__(self, gm, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def fw(graph, inputs):
            self.forward += 1
            return make_boxed_func(graph.forward)

        def bw(graph, inputs):
            if self.fail_backward:
                raise RuntimeError("backward lowering failed on purpose")
            self.backward += 1
            return make_boxed_func(graph.forward)

        return aot_autograd(fw_compiler=fw, bw_compiler=bw)(gm, example_inputs)


@contextlib.contextmanager
def compiled_with(backend):
    """``torch.compile`` as the hot paths call it (static shapes, checked), with ``backend``; fresh caches."""
    real = torch.compile
    calls = []

    def compile_(fn, *, dynamic=None, mode=None):
        calls.append(dict(dynamic=dynamic, mode=mode))
        return real(fn, backend=backend, dynamic=dynamic)

    torch._dynamo.reset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "compile", compile_)
        yield calls


def _policy(cls, action_space=DISCRETE, seed=0, **overrides):
    torch.manual_seed(seed)
    small = {DQNPolicy: dict(model=dict(encoder_hidden_size_list=[32, 32])),
             DiscreteCQLPolicy: dict(model=dict(encoder_hidden_size_list=[32, 32])),
             BCPolicy: dict(model=dict(hidden_size_list=[32, 32])),
             SACPolicy: dict(model=dict(actor_head_hidden_size_list=[32, 32], critic_head_hidden_size_list=[32, 32])),
             }.get(cls, dict(model=dict(actor_head_hidden_size_list=[32, 32], critic_head_hidden_size_list=[32, 32])))
    cfg = EasyDict(deep_merge(deep_merge(cls.default_config(), small), overrides))
    return cls(cfg, OBS, action_space)


def _batches(count=UPDATES, n=32, seed=1, obs_dim=4, action_space=DISCRETE):
    """Batches with every field any policy here reads."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        if isinstance(action_space, gym.spaces.Discrete):
            action = torch.randint(0, int(action_space.n), (n,), generator=g)
            extra = {}
        else:
            action = torch.rand(n, action_space.shape[0], generator=g) * 4 - 2
            extra = {"raw_action": action}
        out.append(make_batch(dict(
            obs=torch.randn(n, obs_dim, generator=g), next_obs=torch.randn(n, obs_dim, generator=g), action=action,
            reward=torch.randn(n, generator=g), terminated=torch.rand(n, generator=g) < 0.2,
            truncated=torch.zeros(n, dtype=torch.bool), discount=torch.full((n,), 0.99),
            weight=torch.rand(n, generator=g),
            logp=torch.randn(n, generator=g) * 0.1 - 1, adv=torch.randn(n, generator=g),
            returns=torch.randn(n, generator=g), value=torch.randn(n, generator=g), **extra)))
    return out


def _max_diff(a, b):
    return max((x.float() - y.float()).abs().max().item() for x, y in zip(a.state_dict().values(),
                                                                         b.state_dict().values()))


def _learn_path(policy):
    return policy.hot_paths[("learn", "loss")]


# ---- config ----------------------------------------------------------------------------------------
def test_policy_params_have_both_switches_off_by_default():
    assert PolicyParams.defaults()["compile"] == "none" and PolicyParams.defaults()["amp"] == "none"
    for cls in (DQNPolicy, PPOPolicy, A2CPolicy, SACPolicy, BCPolicy, DiscreteCQLPolicy, TD3BCPolicy, TD3Policy):
        cfg = cls.default_config()
        assert (cfg["compile"], cfg["amp"]) == ("none", "none"), cls


@pytest.mark.parametrize("key,value,message", [
    ("compile", "cudagraphs", "policy.compile='cudagraphs' is not one of .* (did you mean 'cudagraph'?)"),
    ("amp", "fp16", "policy.amp='fp16' is not one of 'none', 'bf16' (did you mean 'bf16'?)"),
    ("compile", True, "'compile' expects str")])
def test_unknown_mode_is_an_error_at_construction(key, value, message):
    with pytest.raises(ConfigError) as err:
        _policy(DQNPolicy, **{key: value})
    assert re.search(re.escape(message).replace(r"\.\*", ".*"), str(err.value)), str(err.value)


def test_accel_examples_run():
    import doctest

    assert doctest.testmod(accel).failed == 0


def test_defaults_never_call_torch_compile(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("torch.compile called with compile=none"))
    policy = _policy(PPOPolicy)
    policy.learn_mode.forward(_batches(1)[0])
    policy.collect_mode.forward(torch.zeros(2, 4))
    assert all(path.mode == "eager" for path in policy.hot_paths.values())


# ---- compiled == eager -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dqn_runs():
    """UPDATES DQN updates, eagerly and compiled, from the same weights on the same batches."""
    backend = CountingBackend()
    eager, compiled = _policy(DQNPolicy), _policy(DQNPolicy, compile="compile")
    batches = _batches()
    with compiled_with(backend) as calls:
        first = compiled.learn_mode.forward(batches[0])
        graphs_after_first_call = (backend.forward, backend.backward)
        compiled_out = [first] + [compiled.learn_mode.forward(b) for b in batches[1:]]
    eager_out = [eager.learn_mode.forward(b) for b in batches]
    return dict(eager=eager, compiled=compiled, eager_out=eager_out, compiled_out=compiled_out, calls=calls,
                backend=backend, graphs_after_first_call=graphs_after_first_call)


def test_compiled_dqn_updates_match_eager(dqn_runs):
    compiled = dqn_runs["compiled"]
    path = _learn_path(compiled)
    assert path.mode == "compile" and path.fallback_error is None
    assert dqn_runs["calls"][0] == dict(dynamic=False, mode=None)   # static shapes
    assert dqn_runs["graphs_after_first_call"] == (1, 1)             # forward and backward, at the first call
    for e, c in zip(dqn_runs["eager_out"], dqn_runs["compiled_out"]):
        assert float(c["loss"]) == pytest.approx(float(e["loss"]), rel=1e-5, abs=1e-6)
        assert torch.allclose(c["priority"], e["priority"], atol=1e-5)
    assert _max_diff(compiled.model, dqn_runs["eager"].model) < 1e-5
    assert _max_diff(compiled._target_model, dqn_runs["eager"]._target_model) < 1e-5
    assert _max_diff(compiled.model, _policy(DQNPolicy).model) > 1e-4  # the updates did move the weights


def test_compiled_policy_state_dict_and_acting_weights_are_unchanged(dqn_runs):
    eager, compiled = dqn_runs["eager"], dqn_runs["compiled"]
    state = compiled.state_dict()
    assert list(state["model"]) == list(eager.state_dict()["model"])
    assert not any("_orig_mod" in key for part in ("model", "target_model") for key in state[part])
    weights = compiled.acting_weights()
    assert list(weights) == list(eager.acting_weights())
    copy_ = _policy(DQNPolicy, seed=5, compile="compile")
    copy_.load_acting_weights(weights)
    copy_.load_state_dict(copy.deepcopy(state))
    obs = torch.from_numpy(np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32))
    np.testing.assert_array_equal(copy_.eval_mode.forward(obs)["action"], eager.eval_mode.forward(obs)["action"])


@pytest.mark.parametrize("cls,action_space,overrides", [
    (PPOPolicy, DISCRETE, dict(learn=dict(value_clip=True))),
    (PPOPolicy, BOX, {}),
    (SACPolicy, BOX, {}),
    (BCPolicy, BOX, {}),
    (DiscreteCQLPolicy, DISCRETE, {}),
    (TD3BCPolicy, BOX, dict(learn=dict(actor_update_freq=1))),
    (TD3Policy, BOX, dict(learn=dict(actor_update_freq=1))),  # DDPG: the same paths, one critic
])
def test_every_policy_learns_and_acts_compiled_as_eager(cls, action_space, overrides):
    """Two updates, then collect and eval outputs; the RNG draws (sampling) are eager's too under this
    backend, so even the sampled actions match."""
    batches = _batches(2, action_space=action_space)
    obs = torch.from_numpy(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    outputs = []
    for mode in ("none", "compile"):
        policy = _policy(cls, action_space, **dict(overrides, compile=mode))
        with compiled_with(CountingBackend()) if mode == "compile" else contextlib.nullcontext():
            stats = [policy.learn_mode.forward(b) for b in batches]
            torch.manual_seed(7)
            collect = policy.collect_mode.forward(obs)
            act = policy.eval_mode.forward(obs)
        outputs.append((policy, stats, collect, act))
    (eager, e_stats, e_collect, e_eval), (compiled, c_stats, c_collect, c_eval) = outputs
    assert compiled.hot_paths and all(p.mode == "compile" for p in compiled.hot_paths.values()
                                       if p.device.type == "cpu" and p.fallback_error is None)
    assert _learn_path(compiled).mode == "compile"
    for e, c in zip(e_stats, c_stats):
        assert e.keys() == c.keys()
        assert float(c["loss"]) == pytest.approx(float(e["loss"]), rel=1e-5, abs=1e-6)
    assert _max_diff(compiled.model, eager.model) < 1e-5
    for e, c in ((e_collect, c_collect), (e_eval, c_eval)):
        assert e.keys() == c.keys()
        for key in e:
            np.testing.assert_allclose(c[key], e[key], rtol=1e-5, atol=1e-6)


def test_compiled_image_dqn_acts_as_eager():
    """The Nature-CNN acting forward (MLP Q-networks act through their lean forward on the CPU, where no switch applies)."""
    space = gym.spaces.Box(0, 255, (2, 36, 36), np.uint8)
    obs = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (6, 2, 36, 36), dtype=np.uint8))
    actions = []
    for mode in ("none", "compile"):
        torch.manual_seed(0)
        cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(compile=mode, model=dict(
            encoder_hidden_size_list=[16], dueling=False))))
        policy = DQNPolicy(cfg, space, DISCRETE)
        with compiled_with(CountingBackend()):
            actions.append((policy.collect_mode.forward(obs)["action"], policy.eval_mode.forward(obs)["action"]))
    assert policy.hot_paths[("eval", "greedy")].mode == "compile"
    np.testing.assert_array_equal(actions[0][0], actions[1][0])
    np.testing.assert_array_equal(actions[0][1], actions[1][1])


# ---- bad input: never a crash mid-run --------------------------------------------------------------
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(accel, "_WARNED", set())


def test_cudagraph_on_cpu_warns_once_and_runs_eagerly(monkeypatch, caplog):
    _fresh_warnings(monkeypatch)
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("nothing is compiled for cudagraph on cpu"))
    eager, policy = _policy(PPOPolicy), _policy(PPOPolicy, compile="cudagraph")
    with caplog.at_level(logging.WARNING, logger="policies.accel"):
        for p in (eager, policy):
            for batch in _batches(2):
                p.learn_mode.forward(batch)
            p.collect_mode.forward(torch.zeros(3, 4))
            p.eval_mode.forward(torch.zeros(3, 4))
    warnings = [r.getMessage() for r in caplog.records if "cudagraph" in r.getMessage()]
    assert len(warnings) == 1 and "needs a CUDA device" in warnings[0] and "eagerly" in warnings[0]
    assert all(path.mode == "eager" for path in policy.hot_paths.values())
    assert _max_diff(policy.model, eager.model) == 0


def test_torch_compile_unavailable_falls_back_to_eager(monkeypatch, caplog):
    _fresh_warnings(monkeypatch)

    def unavailable(*args, **kwargs):
        raise RuntimeError("torch.compile is not supported on this Python")

    monkeypatch.setattr(torch, "compile", unavailable)
    eager, policy = _policy(DQNPolicy), _policy(DQNPolicy, compile="compile")
    with caplog.at_level(logging.WARNING, logger="policies.accel"):
        for batch in _batches(2):
            eager.learn_mode.forward(batch)
            policy.learn_mode.forward(batch)
    assert _learn_path(policy).mode == "eager"
    assert any("not supported on this Python" in r.getMessage() and "eagerly" in r.getMessage()
               for r in caplog.records)
    assert _max_diff(policy.model, eager.model) == 0


def test_compile_failing_at_first_call_falls_back_once_and_updates_as_eager(monkeypatch, caplog):
    """As when no C++ compiler is installed: torch.compile returns, its first call raises."""
    _fresh_warnings(monkeypatch)
    attempts = []

    def broken_compile(fn, **kwargs):
        def first_call(*args, **kw):
            attempts.append(fn.__name__)
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")
        return first_call

    monkeypatch.setattr(torch, "compile", broken_compile)
    eager, policy = _policy(SACPolicy, BOX), _policy(SACPolicy, BOX, compile="compile")
    obs = torch.zeros(3, 4)
    with caplog.at_level(logging.WARNING, logger="policies.accel"):
        for p in (eager, policy):
            torch.manual_seed(3)  # SAC samples in its loss
            for batch in _batches(3, action_space=BOX):
                p.learn_mode.forward(batch)
            p.eval_mode.forward(obs)
            p.eval_mode.forward(obs)
    assert attempts == ["_critic_loss", "_actor_pass", "_mean_action"]  # one attempt per hot path, then eager
    assert all(path.mode == "eager" and path.fallback_error is not None for path in policy.hot_paths.values())
    warnings = [r.getMessage() for r in caplog.records if "C++ compiler" in r.getMessage()]
    assert len(warnings) == 1 and "runs eagerly" in warnings[0]  # one warning for one cause
    assert _max_diff(policy.model, eager.model) == 0


def test_backward_that_does_not_lower_falls_back_before_the_update(monkeypatch, caplog):
    """torch lowers a backward at the first ``loss.backward()``, outside the hot path; the learner's hot path
    lowers it with the forward, so the failure is caught there and the update is eager's."""
    _fresh_warnings(monkeypatch)
    eager, policy = _policy(DQNPolicy), _policy(DQNPolicy, compile="compile")
    batches = _batches(2)
    with compiled_with(CountingBackend(fail_backward=True)), caplog.at_level(logging.WARNING, logger="policies.accel"):
        for batch in batches:
            policy.learn_mode.forward(batch)
    for batch in batches:
        eager.learn_mode.forward(batch)
    assert _learn_path(policy).mode == "eager"
    assert "backward lowering failed on purpose" in str(_learn_path(policy).fallback_error)
    assert any("backward lowering failed" in r.getMessage() for r in caplog.records)
    assert _max_diff(policy.model, eager.model) < 1e-6


def test_an_error_of_the_function_itself_is_raised_not_hidden(monkeypatch):
    """A batch that fails eagerly too is the caller's error: raised as eager raises it, compile kept."""
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)  # "compiled" = the function itself
    policy = _policy(DQNPolicy, compile="compile")
    bad = _batches(1, obs_dim=5)[0]
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        policy.learn_mode.forward(bad)
    assert _learn_path(policy).mode == "compile" and _learn_path(policy).fallback_error is None


def test_cudagraph_learner_under_ddp_uses_compile(monkeypatch, caplog):
    """The mode a hot path picks (nothing runs: the device is only named)."""
    _fresh_warnings(monkeypatch)
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    with caplog.at_level(logging.WARNING, logger="policies.accel"):
        learner = HotPath(lambda: None, "learn", "cudagraph", "none", torch.device("cuda", 0), ddp=True, train=True)
        actor = HotPath(lambda: None, "act", "cudagraph", "none", torch.device("cuda", 0))
    assert learner.mode == "compile" and actor.mode == "cudagraph"
    assert any("not supported for the learner under DDP" in r.getMessage() for r in caplog.records)


def test_cudagraph_calls_start_a_step_and_hand_out_copies(monkeypatch):
    """A CUDA graph's outputs live in its pool and are overwritten by its next replay: each call marks a new
    step first, and returns copies (here, a "graph" that reuses one output buffer, run on the CPU)."""
    pool = torch.zeros(3)
    steps = []

    def graph(x):
        pool.copy_(x * 2)
        return pool, {"sum": pool.sum()}

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: graph if kwargs["mode"] == "reduce-overhead" else fn)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: steps.append(len(steps)))
    path = HotPath(graph, "act", "cudagraph", "none", torch.device("cuda", 0))
    first, stats = path(torch.ones(3))
    second, _ = path(torch.full((3,), 5.0))
    assert steps == [0, 1] and path.mode == "cudagraph"
    assert first.tolist() == [2.0, 2.0, 2.0] and float(stats["sum"]) == 6.0 and second.tolist() == [10.0] * 3


def test_a_policy_without_hot_paths_says_the_switch_does_not_apply(monkeypatch, caplog):
    _fresh_warnings(monkeypatch)

    class Plain(Policy):
        def __init__(self, cfg):
            super().__init__(cfg, OBS, DISCRETE)
            self.model = self.placement.build(lambda: torch.nn.Linear(4, 3))

        def _forward_eval(self, obs):
            return {"action": self.model(torch.as_tensor(obs)).argmax(1).numpy()}

    policy = Plain({"compile": "compile"})
    with caplog.at_level(logging.WARNING, logger="policies.accel"):
        policy.eval_mode.forward(torch.zeros(2, 4))
        policy.eval_mode.forward(torch.zeros(2, 4))
    warnings = [r.getMessage() for r in caplog.records if "does not route" in r.getMessage()]
    assert warnings == ["Plain's eval mode does not route its forward through policy.compile/policy.amp "
                        "(policies.accel.hot_path): it runs eagerly in fp32"]


def test_random_actions_first_are_not_taken_for_a_mode_without_hot_paths(monkeypatch, caplog):
    """SAC's first collects are uniformly random (no forward); its later ones go through the hot path."""
    _fresh_warnings(monkeypatch)
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    policy = _policy(SACPolicy, BOX, compile="compile")
    with caplog.at_level(logging.WARNING, logger="policies.accel"):
        policy.collect_mode.forward(torch.zeros(2, 4), random=True)
        policy.collect_mode.forward(torch.zeros(2, 4))
    assert not [r for r in caplog.records if "does not route" in r.getMessage()]
    assert policy.hot_paths[("collect", "sample")].mode == "compile"


# ---- bf16 --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,action_space", [(DQNPolicy, DISCRETE), (PPOPolicy, DISCRETE), (SACPolicy, BOX)])
def test_bf16_loss_is_close_to_fp32_and_the_update_stays_fp32(cls, action_space):
    batch = _batches(1, action_space=action_space)[0]
    losses = {}
    for amp in ("none", "bf16"):
        policy = _policy(cls, action_space, amp=amp)
        torch.manual_seed(3)  # SAC samples actions in its loss
        out = policy.learn_mode.forward(batch)
        assert out["loss"].dtype == torch.float32
        assert all(p.dtype == torch.float32 for p in policy.model.parameters())
        state = policy.optimizer_step.optimizer.state_dict()["state"]
        assert all(v.dtype == torch.float32 for s in state.values() for k, v in s.items() if k != "step")
        losses[amp] = float(out["loss"])
    assert losses["bf16"] != losses["none"]  # bf16 did run
    assert losses["bf16"] == pytest.approx(losses["none"], rel=0.05, abs=0.02)


@pytest.mark.parametrize("build,width,value", [
    (lambda: TwinQ(4, 2, [64, 64]), 6, lambda net, x: net(x[:, :4], x[:, 4:])[0]),
    (lambda: QNetwork(4, 3, [64, 64]), 4, lambda net, x: net(x)),
    (lambda: ActorCritic(4, 3, [64], [64], continuous=False), 4, lambda net, x: net(x)[1]),
], ids=["td3-sac critic", "dqn head", "ppo critic"])
def test_bf16_output_layers_run_in_fp32(build, width, value):
    """Under bf16 autocast the hidden layers run in bf16 and the output layer in fp32 (``OutputLinear``): an
    output of about 300 keeps fp32's resolution, where bf16 would round it to a multiple of 2 (noise the size of a
    step's reward in a TD error)."""
    torch.manual_seed(0)
    net = build()
    heads = [m for m in net.modules() if isinstance(m, OutputLinear)]
    assert heads, "the network has no OutputLinear"
    with torch.no_grad():
        for head in heads:
            head.bias.fill_(300.0)
        x = torch.randn(256, width)  # TwinQ takes the observation and the action side by side
        fp32 = value(net, x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = value(net, x)
    assert mixed.dtype == torch.float32
    assert 0 < (mixed - fp32).abs().max() < 0.1  # the hidden layers' rounding only
    assert (torch.remainder(mixed, 2.0) != 0).any()  # not rounded to bf16's spacing at 300


@pytest.mark.parametrize("native", [False, True, None])
def test_bf16_on_a_cpu_without_bf16_instructions_says_fp32_is_faster(monkeypatch, caplog, native):
    """Emulated bf16 matmuls are slower than fp32's (2x on a small MLP, 30x on the Nature CNN here): one warning
    where the CPU is known to lack them, none where it has them or cannot be read."""
    _fresh_warnings(monkeypatch)
    monkeypatch.setattr(accel, "cpu_has_native_bf16", lambda: native)
    with caplog.at_level(logging.WARNING, logger="policies.accel"):
        policy = _policy(DQNPolicy, amp="bf16")
        policy.learn_mode.forward(_batches(1)[0])
    warned = [r.getMessage() for r in caplog.records if "no bf16 instructions" in r.getMessage()]
    assert len(warned) == (1 if native is False else 0)
    assert _learn_path(policy).amp == "bf16"  # a warning, not a refusal: the run is the user's choice


def test_bf16_autocasts_the_hot_paths_compiled_too():
    """Inside the compiled learner the matmuls run in bf16: the loss moves off fp32's, and stays close."""
    batch = _batches(1)[0]
    losses = []
    for overrides in (dict(), dict(amp="bf16", compile="compile")):
        policy = _policy(DQNPolicy, **overrides)
        with compiled_with(CountingBackend()):
            losses.append(float(policy.learn_mode.forward(batch)["loss"]))
    assert _learn_path(policy).mode == "compile" and _learn_path(policy).amp == "bf16"
    assert losses[1] != losses[0] and losses[1] == pytest.approx(losses[0], rel=0.05, abs=0.02)


# ---- DDP ---------------------------------------------------------------------------------------------
def ddp_compiled_updates(out_dir):
    """In each of 2 gloo ranks: a compiled DQN (its own init: DDP gives every rank rank 0's) makes 3 updates on
    this rank's batches; dumps the parameters and what its learner hot path was."""
    from engine.distributed import get_rank
    from middleware.ddp import DDPMiddleware

    rank = get_rank()
    policy = _policy(DQNPolicy, seed=rank, compile="compile", learn=dict(learning_rate=0.01))
    ddp = DDPMiddleware(policy.learn_mode)
    backend = CountingBackend()
    with compiled_with(backend):
        for batch in _batches(3, n=16, seed=10 + rank):
            policy.learn_mode.forward(batch)
    path = _learn_path(policy)
    dump = {"params": {k: v.flatten().tolist() for k, v in policy.model.state_dict().items()},
            "mode": path.mode, "ddp": path.ddp, "error": repr(path.fallback_error), "graphs": backend.forward,
            "backward_graphs": backend.backward}
    ddp.on_finish(None)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(dump, f)


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_compiled_learner_under_ddp_matches_one_process_on_the_joined_batches(tmp_path):
    from engine import launch

    launch(ddp_compiled_updates, nprocs=2, args=(str(tmp_path),), timeout=60.0)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for run in ranks:
        assert run["mode"] == "compile" and run["ddp"] and run["error"] == "None"
        # the loss before and after the DDP call, and the wrapped module's forward (DDPOptimizer's): 3 graphs
        assert run["graphs"] >= 3 and run["backward_graphs"] >= 2, run
    assert ranks[0]["params"] == ranks[1]["params"]
    # one process, eager, on both ranks' batches joined: DDP's mean gradient is this one's
    policy = _policy(DQNPolicy, seed=0, compile="none", learn=dict(learning_rate=0.01))
    for b0, b1 in zip(_batches(3, n=16, seed=10), _batches(3, n=16, seed=11)):
        policy.learn_mode.forward(make_batch({k: torch.cat([getattr(b0, k), getattr(b1, k)]) for k in b0.keys()}))
    for key, value in policy.model.state_dict().items():
        assert torch.allclose(torch.tensor(ranks[0]["params"][key]), value.flatten(), atol=1e-5), key


def test_a_compiled_path_that_fails_inside_a_capture_fails_the_capture(monkeypatch):
    """Inside a captured update (``policy.compile=cudagraph_update``) a compiled path that fails is not rerun
    eagerly (that would record eager kernels into the graph and turn the path eager for good, unnamed): the
    error reaches the capture, which names it and leaves the updates to the eager learner."""
    import policies.accel

    def failing(x):
        raise RuntimeError("recompile refused (a test's reason)")

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: failing)
    path = HotPath(lambda x: x + 1, "learn", "cudagraph_update", "none", torch.device("cuda", 0), captured=True)
    assert path.mode == "compile"
    monkeypatch.setattr(policies.accel, "_capturing", lambda device: True)
    with pytest.raises(RuntimeError, match="recompile refused"):
        path(torch.ones(2))
    assert path.mode == "compile" and path.fallback_error is None
    monkeypatch.setattr(policies.accel, "_capturing", lambda device: False)  # outside a capture: eager, named
    assert path(torch.ones(2)).tolist() == [2.0, 2.0] and path.mode == "eager"
    assert "recompile refused" in str(path.fallback_error)
