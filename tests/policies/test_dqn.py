"""DQN's target and loss against an independent computation; start-up checks; NaN handling."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from data.batch import make_batch
from policies import DQNPolicy, NonFiniteLossError, SpaceMismatchError
from engine.config import deep_merge

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def _policy(**overrides):
    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), overrides))
    return DQNPolicy(cfg, OBS, ACT)


def _batch(n=4):
    g = torch.Generator().manual_seed(0)
    return make_batch(dict(obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g),
                        action=torch.tensor([0, 1, 1, 0])[:n], reward=torch.tensor([1.0, -1.0, 0.5, 2.0])[:n],
                        terminated=torch.tensor([False, True, False, False])[:n],
                        truncated=torch.tensor([False, False, True, False])[:n],
                        discount=torch.tensor([0.9, 0.9, 0.81, 0.729])[:n], weight=torch.ones(n)))


@pytest.mark.parametrize("double_q", [True, False])
def test_dqn_loss_matches_independent_computation(double_q):
    torch.manual_seed(0)
    policy = _policy(learn=dict(double_q=double_q, td_loss="mse"))
    online = copy.deepcopy(policy.model)
    target_net = copy.deepcopy(policy._target_model)
    # make target differ from online so double vs plain matters
    with torch.no_grad():
        for p in target_net.parameters():
            p.add_(0.3)
    policy._target_model.load_state_dict(target_net.state_dict())
    batch = _batch()
    with torch.no_grad():
        q = online(batch.obs).gather(1, batch.action[:, None]).squeeze(1)
        if double_q:
            a = online(batch.next_obs).argmax(1, keepdim=True)
            nv = target_net(batch.next_obs).gather(1, a).squeeze(1)
        else:
            nv = target_net(batch.next_obs).max(1).values
        # terminated cuts the bootstrap; truncated (row 2) still bootstraps
        target = batch.reward + batch.discount * (1 - batch.terminated.float()) * nv
        expected = ((q - target) ** 2).mean()
    out = policy.learn_mode.forward(batch)
    assert out["loss"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert torch.allclose(out["priority"], (q - target).abs(), atol=1e-5)
    assert target[1] == batch.reward[1]  # terminated: no bootstrap at all


def test_dqn_hard_target_update_every_freq():
    policy = _policy(learn=dict(target_update_freq=2))
    before = copy.deepcopy(policy._target_model.state_dict())
    policy.learn_mode.forward(_batch())
    assert all(torch.equal(before[k], v) for k, v in policy._target_model.state_dict().items())
    policy.learn_mode.forward(_batch())
    assert all(torch.equal(policy.model.state_dict()[k], v) for k, v in policy._target_model.state_dict().items())


def test_dqn_soft_target_update():
    policy = _policy(learn=dict(target_theta=0.5))
    t0 = [p.clone() for p in policy._target_model.parameters()]
    policy.learn_mode.forward(_batch())
    for before, tgt, online in zip(t0, policy._target_model.parameters(), policy.model.parameters()):
        assert torch.allclose(tgt, 0.5 * before + 0.5 * online.detach(), atol=1e-6)


def test_dqn_importance_weights_scale_loss():
    policy = _policy(priority=True, priority_IS_weight=True, learn=dict(td_loss="mse"))
    ref = copy.deepcopy(policy)
    batch = _batch()
    weighted = make_batch({**{k: getattr(batch, k) for k in batch.keys()}, "weight": torch.full((4,), 0.5)})
    half = policy.learn_mode.forward(weighted)["loss"].item()
    full = ref.learn_mode.forward(batch)["loss"].item()
    assert half == pytest.approx(full / 2, rel=1e-5)


def test_dqn_collect_eps_and_eval_greedy():
    policy = _policy()
    obs = torch.zeros(1000, 3)
    greedy = policy.eval_mode.forward(obs)["action"]
    assert (greedy == greedy[0]).all()
    explored = policy.collect_mode.forward(obs, eps=1.0)["action"]
    assert 350 < int((explored != greedy[0]).sum()) < 650


def test_dqn_model_shape_mismatch_names_both_shapes():
    with pytest.raises(SpaceMismatchError, match=r"obs_shape=5.*\(3,\)"):
        _policy(model=dict(obs_shape=5))
    with pytest.raises(SpaceMismatchError, match=r"action_shape=3.*Discrete\(2\)"):
        _policy(model=dict(action_shape=3))


def test_dqn_rejects_continuous_action_space():
    cfg = EasyDict(DQNPolicy.default_config())
    with pytest.raises(SpaceMismatchError, match="discrete action space.*Box"):
        DQNPolicy(cfg, OBS, gym.spaces.Box(-1, 1, (1,), np.float32))


def test_dqn_nan_loss_raises_before_step_and_keeps_parameters():
    policy = _policy()
    params = copy.deepcopy(policy.model.state_dict())
    batch = _batch()
    bad = make_batch({**{k: getattr(batch, k) for k in batch.keys()}, "reward": torch.full((4,), float("nan"))})
    with pytest.raises(NonFiniteLossError, match="learning_rate"):
        policy.learn_mode.forward(bad)
    assert all(torch.equal(params[k], v) for k, v in policy.model.state_dict().items())


def test_dqn_state_dict_round_trip():
    a, b = _policy(), _policy()
    a.learn_mode.forward(_batch())
    b.load_state_dict(a.state_dict())
    obs = torch.randn(5, 3)
    assert np.array_equal(a.eval_mode.forward(obs)["action"], b.eval_mode.forward(obs)["action"])
    assert b.optimizer_step.updates == 1


@pytest.mark.parametrize("dueling", [True, False])
def test_host_greedy_action_matches_the_module_and_tracks_updates(dueling):
    policy = _policy(model=dict(dueling=dueling))
    obs = torch.from_numpy(np.random.default_rng(0).standard_normal((256, 3)).astype(np.float32))

    def module_greedy():
        with torch.no_grad():
            return policy.model(obs).argmax(1)

    assert torch.equal(policy.model.host_greedy_action(obs), module_greedy())
    for _ in range(20):  # in-place optimizer steps must show through the weights' views
        policy.learn_mode.forward(_batch())
    assert torch.equal(policy.model.host_greedy_action(obs), module_greedy())


def test_epsilon_draws_spend_one_row_per_step_and_start_again_for_a_new_eps():
    from policies.dqn import EpsilonDraws
    from policies.placement import DeviceGenerators

    torch.manual_seed(0)
    draws = EpsilonDraws(DeviceGenerators(), action_dim=4, ahead=3)
    greedy = torch.full((500,), 7)
    rows = [draws.apply(greedy, 0.5) for _ in range(7)]  # past two refills
    assert all(not torch.equal(a, b) for a, b in zip(rows, rows[1:]))  # a new row each step
    for row in rows:
        explored = row != 7
        assert 0.4 < float(explored.float().mean()) < 0.6 and set(row[explored].tolist()) <= {0, 1, 2, 3}
    assert torch.equal(draws.apply(greedy, 1.0).unique().sort().values, torch.arange(4))  # every row explores
    assert draws.apply(greedy, 0.0) is greedy


def test_placement_doctests():
    import doctest

    import policies.dqn
    import policies.placement

    assert doctest.testmod(policies.placement).failed == 0 and doctest.testmod(policies.dqn).failed == 0
