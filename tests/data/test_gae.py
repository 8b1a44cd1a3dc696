"""GAE against hand-computed values: termination, truncation, env boundaries, chunk ends."""
from __future__ import annotations

import pytest
import torch

from data.gae import gae_advantages

G, L = 0.9, 0.8


def _t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def _b(rows):
    return torch.tensor(rows, dtype=torch.bool)


class _Valuer:
    """The least a GAE stage's policy is: values, and no acting."""

    def __init__(self, value):
        self.value = value

    @staticmethod
    def forward(obs, **kwargs):
        raise AssertionError("GAE does not act")


def test_gae_single_stream_no_end_hand_computed():
    r, v, nv = _t([[1.0], [2.0], [3.0]]), _t([[0.5], [1.0], [1.5]]), _t([[1.0], [1.5], [2.0]])
    f = _b([[False]] * 3)
    adv, ret = gae_advantages(r, v, nv, f, f, G, L)
    d2 = 3 + G * 2.0 - 1.5
    d1 = 2 + G * 1.5 - 1.0
    d0 = 1 + G * 1.0 - 0.5
    a2 = d2
    a1 = d1 + G * L * a2
    a0 = d0 + G * L * a1
    assert adv.squeeze(1).tolist() == pytest.approx([a0, a1, a2])
    assert ret.squeeze(1).tolist() == pytest.approx([a0 + 0.5, a1 + 1.0, a2 + 1.5])


def test_gae_termination_bootstraps_from_zero_and_stops():
    r, v = _t([[1.0], [1.0], [1.0]]), _t([[0.5], [0.5], [0.5]])
    nv = _t([[0.5], [9.0], [0.7]])  # 9.0: value of the terminal obs, which must be ignored
    term = _b([[False], [True], [False]])
    trunc = _b([[False]] * 3)
    adv, _ = gae_advantages(r, v, nv, term, trunc, G, L)
    a2 = 1 + G * 0.7 - 0.5
    a1 = 1 - 0.5                       # no bootstrap, and a2 (next episode) does not leak in
    a0 = (1 + G * 0.5 - 0.5) + G * L * a1
    assert adv.squeeze(1).tolist() == pytest.approx([a0, a1, a2])


def test_gae_truncation_bootstraps_from_real_final_obs_value_but_stops():
    r, v = _t([[1.0], [1.0], [1.0]]), _t([[0.5], [0.5], [0.5]])
    nv = _t([[0.5], [4.0], [0.7]])  # 4.0: value of the real final obs of the truncated episode
    term = _b([[False]] * 3)
    trunc = _b([[False], [True], [False]])
    adv, _ = gae_advantages(r, v, nv, term, trunc, G, L)
    a2 = 1 + G * 0.7 - 0.5
    a1 = 1 + G * 4.0 - 0.5             # bootstraps, but does not accumulate a2
    a0 = (1 + G * 0.5 - 0.5) + G * L * a1
    assert adv.squeeze(1).tolist() == pytest.approx([a0, a1, a2])


def test_gae_env_columns_are_independent():
    r = _t([[1.0, 100.0], [1.0, 100.0]])
    v = _t([[0.0, 0.0], [0.0, 0.0]])
    nv = _t([[0.0, 0.0], [0.0, 0.0]])
    f = _b([[False, False]] * 2)
    adv, _ = gae_advantages(r, v, nv, f, f, 1.0, 1.0)
    assert adv[:, 0].tolist() == [2.0, 1.0] and adv[:, 1].tolist() == [200.0, 100.0]


def test_gae_estimator_flattens_with_adv_and_returns():
    from engine import OnlineRLContext
    from middleware import gae_estimator
    from data.batch import make_batch

    ctx = OnlineRLContext()
    ctx.trajectories = make_batch(dict(obs=torch.zeros(3, 2, 4), next_obs=torch.zeros(3, 2, 4),
                                    reward=torch.ones(3, 2), value=torch.zeros(3, 2),
                                    terminated=torch.zeros(3, 2, dtype=torch.bool),
                                    truncated=torch.zeros(3, 2, dtype=torch.bool), action=torch.zeros(3, 2)))
    gae_estimator(_Valuer(lambda obs: torch.zeros(len(obs))), gamma=1.0, lam=1.0)(ctx)
    assert ctx.trajectories.adv.shape == (6,) and ctx.trajectories.obs.shape == (6, 4)
    assert ctx.trajectories.adv.tolist() == [3.0, 3.0, 2.0, 2.0, 1.0, 1.0]  # time-major flattening


def test_gae_estimator_ends_an_agents_stream_where_it_leaves_its_row():
    """One row of two agents, three steps; agent 1 dies in step 0 while agent 0 plays on. Agent 1's step 0
    bootstraps from zero (not from the value of what its next observation holds), and its later steps, where it no
    longer acts, reach neither its advantage nor the value targets a value normalisation observes."""
    from engine import OnlineRLContext
    from middleware import gae_estimator
    from data.batch import make_batch

    alive = torch.tensor([[[1, 1]], [[1, 0]], [[1, 0]]], dtype=torch.int8)
    next_alive = torch.tensor([[[1, 0]], [[1, 0]], [[1, 0]]], dtype=torch.int8)
    obs = {"obs": torch.zeros(3, 1, 2, 4), "alive": alive}
    next_obs = {"obs": torch.zeros(3, 1, 2, 4), "alive": next_alive}
    reward = torch.tensor([[[1.0, 5.0]], [[1.0, 0.0]], [[1.0, 0.0]]])
    flags = torch.zeros(3, 1, dtype=torch.bool)
    ctx = OnlineRLContext()
    ctx.trajectories = make_batch(dict(obs=obs, next_obs=next_obs, reward=reward, value=torch.full((3, 1, 2), 10.0),
                                       terminated=flags, truncated=flags, action=torch.zeros(3, 1, 2)))
    seen = []
    every_10 = _Valuer(lambda obs: torch.full(obs["alive"].shape, 10.0))  # the gone agent's value 10 too
    gae_estimator(every_10, gamma=1.0, lam=1.0, observe_returns=seen.append)(ctx)
    adv = ctx.trajectories.adv.reshape(3, 2)
    assert adv[0, 1].item() == pytest.approx(5.0 - 10.0)  # r - V: no bootstrap, no later steps
    assert adv[:, 0].tolist() == pytest.approx([3.0, 2.0, 1.0])  # agent 0 plays on to the chunk's end
    assert sorted(seen[0].tolist()) == pytest.approx([5.0, 11.0, 12.0, 13.0])  # the four entries that acted


def test_agent_flags_keep_the_rows_end_for_every_agent():
    from data.gae import agent_flags
    term, trunc = _b([[True], [False]]), _b([[False], [True]])
    gone = torch.zeros(2, 1, 2, dtype=torch.int8)  # a row's final observation: no agent acts next
    a_term, a_trunc = agent_flags(term, trunc, torch.ones(2, 1, 2, dtype=torch.int8), gone)
    assert a_term[:, 0].tolist() == [[True, True], [False, False]]  # truncation stays a truncation
    assert a_trunc[:, 0].tolist() == [[False, False], [True, True]]
