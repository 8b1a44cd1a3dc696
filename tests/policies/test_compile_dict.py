"""``policy.compile`` with dictionary observations, for the discrete algorithms: the hot paths get the tree as plain
dicts (``policies.normalisation.model_obs``), which dynamo traces whole. Before, DQN and Rainbow broke each graph
12 times and PPO and A2C 8 times at the treetensor's key lookups, and PPO-LSTM hit dynamo's recompile limit on the
tree's leaves (SAC and TD3: tests/policies/test_sac_td3_dict.py)."""
from __future__ import annotations

import copy

import pytest
import torch

import test_dqn_dict as dqn_dict
import test_ppo_dict as ppo_dict
from data.replay import ReplayBuffer
from engine import OnlineRLContext
from middleware import StepCollector
from test_compile import CountingBackend, compiled_with


def _dqn_run(cls, compile_mode):
    env = dqn_dict._taxi()
    torch.manual_seed(0)
    policy = dqn_dict._policy(cls, env, learn=dict(batch_size=32), compile=compile_mode)
    buffer = ReplayBuffer(1000)
    collect = StepCollector(policy.collect_mode, env, n_sample=64)
    ctx = OnlineRLContext()
    ctx.collect_kwargs = {"eps": 0.5} if cls is dqn_dict.DQNPolicy else {}
    for _ in range(3):
        collect(ctx)
        buffer.push(ctx.trajectories)
    torch.manual_seed(1)
    batch = buffer.sample(32)
    return policy, [policy.learn_mode.forward(copy.deepcopy(batch))["loss"] for _ in range(2)]


def _ppo_run(algo, compile_mode):
    env = ppo_dict._vector(ppo_dict.ENVS["taxi"])
    policy = ppo_dict._policy(algo, env, compile=compile_mode)
    batch = ppo_dict._collect(policy, env, algo)
    return policy, [policy.learn_mode.forward(copy.deepcopy(batch))["loss"] for _ in range(2)]


@pytest.mark.parametrize("algo", ["dqn", "rainbow", "ppo", "a2c"])
def test_compiled_hot_paths_trace_dict_observations_whole_and_match_eager(algo):
    from torch._dynamo.utils import counters

    run = {"dqn": lambda m: _dqn_run(dqn_dict.DQNPolicy, m), "rainbow": lambda m: _dqn_run(dqn_dict.RainbowPolicy, m),
           "ppo": lambda m: _ppo_run("ppo", m), "a2c": lambda m: _ppo_run("a2c", m)}[algo]
    _, eager = run("none")
    counters.clear()
    with compiled_with(CountingBackend()):
        compiled, losses = run("compile")
    paths = compiled.hot_paths.values()
    assert paths and all(p.mode == "compile" and p.fallback_error is None for p in paths), \
        [(p.name, p.mode, p.fallback_error) for p in paths]
    assert not counters["graph_break"], list(counters["graph_break"])[:2]
    for e, c in zip(eager, losses):
        assert float(c) == pytest.approx(float(e), rel=1e-4, abs=1e-5)
