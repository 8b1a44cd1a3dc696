"""QMIX's recurrent agent (EPyMARL's GRU agent, issue 32 item 2): acting carries each agent's memory, learning
replays sequences unrolled from the stored memory and reproduces the acting values, and what cannot work with
a memory is refused by name."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

import dizoo.pettingzoo.envs  # noqa: E402,F401  (registers the mpe env type)
from data.batch import make_batch  # noqa: E402
from data.obs import from_plain  # noqa: E402
from engine.config import ConfigError, compile_config  # noqa: E402
from policies.agent_q_networks import AgentsQNetwork  # noqa: E402
from policies.greedy import NotExportableError  # noqa: E402
from policies.qmix import QMixPolicy  # noqa: E402

ROWS = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (3, 4), np.float32),
                        "alive": gym.spaces.Box(0, 1, (3,), np.int8),
                        "state": gym.spaces.Box(-1, 1, (12,), np.float32)})
ACTIONS = gym.spaces.MultiDiscrete([5, 5, 5])


def _rows(*lead):
    return from_plain({"obs": torch.randn(*lead, 3, 4), "alive": torch.ones(*lead, 3),
                       "state": torch.randn(*lead, 12)})


def test_the_learning_unroll_reproduces_acting_step_by_step_and_the_next_step_s_values():
    torch.manual_seed(0)
    net = AgentsQNetwork(4, 12, 3, 5, [16], mixer="qmix", recurrent_size=8)
    B, L = 2, 6
    obs = _rows(B, L)
    done = torch.zeros(B, L, dtype=torch.bool)
    done[0, 2] = True                                          # sequence 0's episode ends at step 2
    next_obs = _rows(B, L)
    for b in range(B):                                         # where it goes on, next_obs is the next step's obs
        for t in range(L - 1):
            if not done[b, t]:
                for key in ("obs", "alive", "state"):
                    next_obs[key][b, t] = obs[key][b, t + 1]
    memory0 = torch.randn(B, 3, 8)
    acted, memory = [], memory0
    for t in range(L):                                         # acting: the env loop zeroes memory after an end
        q, after = net.step(obs[:, t], memory)
        acted.append(q)
        memory = after.masked_fill(done[:, t].view(B, 1, 1), 0)
    acted = torch.stack(acted, 1)
    starts = torch.zeros_like(done)
    starts[:, 1:] = done[:, :-1]
    q, next_q = net.sequence_values(obs, next_obs, memory0, starts)
    assert torch.allclose(q, acted, atol=1e-5)
    goes_on = ~done[:, :-1]
    assert torch.allclose(next_q[:, :-1][goes_on], q[:, 1:][goes_on], atol=1e-5)
    q_burnt, _ = net.sequence_values(obs, next_obs, memory0, starts, burn_in=2)
    assert torch.allclose(q_burnt, acted[:, 2:], atol=1e-5)   # the burn-in only warms the memory


def _policy(**learn):
    cfg = QMixPolicy.default_config()
    cfg["model"] = dict(cfg["model"], recurrent=True, hidden_size=8, hidden_size_list=[16])
    cfg["learn"] = dict(cfg["learn"], **learn)
    return QMixPolicy(dict(cfg, type="qmix"), ROWS, ACTIONS)


def test_acting_carries_the_memory_and_learning_takes_sequences():
    policy = _policy(seq_len=4, burn_in=1, batch_size=8)
    collect = policy.collect_mode
    state = collect.initial_state(2)
    assert state.shape == (2, 3, 8) and not state.any()
    out = collect.forward(_rows(2), eps=0.5, state=state)
    assert out["action"].shape == (2, 3) and torch.equal(out["state"], state) and out["next_state"].any()
    assert policy.eval_mode.forward(_rows(2), state=out["next_state"])["next_state"].shape == (2, 3, 8)
    with pytest.raises(TypeError, match="acts with a memory"):
        policy.eval_mode.forward(_rows(2))
    B, L = 2, 4
    batch = make_batch({"obs": _rows(B, L), "next_obs": _rows(B, L), "action": torch.randint(5, (B, L, 3)),
                        "reward": torch.randn(B, L, 3), "discount": torch.full((B, L), 0.99),
                        "terminated": torch.zeros(B, L, dtype=torch.bool),
                        "truncated": torch.zeros(B, L, dtype=torch.bool), "state": torch.randn(B, 3, 8),
                        "episode_start": torch.zeros(B, L, dtype=torch.bool), "weight": torch.ones(B),
                        "index": torch.arange(B)})
    before = copy.deepcopy(policy.model.state_dict())
    result = policy.learn_mode.forward(batch)
    assert torch.isfinite(result["loss"]) and result["priority"].shape == (B,)
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    with pytest.raises(NotExportableError, match="memory"):
        policy.greedy_module()


@pytest.mark.parametrize("override, message", [
    (dict(nstep=3), "policy.nstep=3 with policy.model.recurrent=True"),
    (dict(learn=dict(seq_len=8, burn_in=8)), "burn_in=8 leaves no step"),
    (dict(learn=dict(seq_len=10, batch_size=64)), "not a whole number of sequences"),
    (dict(learn=dict(seq_len=32), other=dict(replay_buffer=dict(replay_buffer_size=300))),
     "replay_buffer_size=300 is too small .* at least"),
])
def test_settings_a_recurrent_agent_cannot_learn_from_are_refused_by_name(override, message):
    policy = dict(type="qmix", model=dict(recurrent=True), **override)
    with pytest.raises(ConfigError, match=message):
        compile_config(dict(env=dict(env_id="simple_spread_v3"), policy={k: v for k, v in policy.items()
                                                                         if k != "type"}),
                       dict(env=dict(type="mpe"), policy=dict(type="qmix")))


@pytest.mark.parametrize("recurrent", [False, True], ids=["feed-forward", "recurrent"])
def test_compiled_hot_paths_trace_the_agents_rows_whole_and_match_eager(recurrent):
    """The rows reach the hot paths as plain dicts (a tree breaks dynamo's graph at each key lookup): the learner's
    loss and the acting step compile without a graph break or a recompile, and learn as eager does."""
    from torch._dynamo.utils import counters
    from test_compile import CountingBackend, compiled_with

    def run(compile_mode):
        torch.manual_seed(0)
        cfg = QMixPolicy.default_config()
        cfg["model"] = dict(cfg["model"], recurrent=recurrent, hidden_size=8, hidden_size_list=[16])
        cfg["learn"] = dict(cfg["learn"], seq_len=4, burn_in=1, batch_size=8)
        policy = QMixPolicy(dict(cfg, type="qmix", compile=compile_mode), ROWS, ACTIONS)
        torch.manual_seed(1)
        lead = (2, 4) if recurrent else (8,)
        fields = {"obs": _rows(*lead), "next_obs": _rows(*lead), "action": torch.randint(5, lead + (3,)),
                  "reward": torch.randn(*lead, 3), "discount": torch.full(lead, 0.99),
                  "terminated": torch.zeros(lead, dtype=torch.bool), "truncated": torch.zeros(lead, dtype=torch.bool),
                  "weight": torch.ones(lead[0]), "index": torch.arange(lead[0])}
        if recurrent:
            fields.update(state=torch.randn(2, 3, 8), episode_start=torch.zeros(2, 4, dtype=torch.bool))
        losses = [policy.learn_mode.forward(make_batch(copy.deepcopy(fields)))["loss"] for _ in range(3)]
        memory = policy.collect_mode.initial_state(2) if recurrent else None
        for _ in range(3):  # acting, with a memory carried for the recurrent agent
            out = policy.collect_mode.forward(_rows(2), eps=0.0, **({"state": memory} if recurrent else {}))
            memory = out.get("next_state")
        return policy, losses

    _, eager = run("none")
    counters.clear()
    with compiled_with(CountingBackend()):
        compiled, losses = run("compile")
    paths = list(compiled.hot_paths.values())
    assert paths and all(p.mode == "compile" and p.fallback_error is None for p in paths), \
        [(p.name, p.mode, p.fallback_error) for p in paths]
    assert not counters["graph_break"], list(counters["graph_break"])[:2]
    for e, c in zip(eager, losses):
        assert float(c) == pytest.approx(float(e), rel=1e-4, abs=1e-5)
