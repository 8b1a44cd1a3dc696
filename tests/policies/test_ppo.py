"""PPO's and A2C's losses on a fixed batch against an independent computation; start-up checks."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from engine.config import deep_merge
from data.batch import make_batch
from policies import A2CPolicy, PPOPolicy, SpaceMismatchError

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)


def _policy(cls, action_space, **learn):
    cfg = EasyDict(deep_merge(cls.default_config(), dict(learn=dict(learn, grad_clip_value=0.0))))
    torch.manual_seed(0)
    return cls(cfg, OBS, action_space)


def _batch(continuous, n=8):
    g = torch.Generator().manual_seed(1)
    action = torch.randn(n, 1, generator=g) if continuous else torch.randint(0, 3, (n,), generator=g)
    extra = {"raw_action": action * 3} if continuous else {}  # raw samples may lie outside the bounds
    return make_batch(dict(obs=torch.randn(n, 3, generator=g), action=action, **extra, logp=torch.randn(n, generator=g) * 0.1 - 1,
                        adv=torch.randn(n, generator=g), returns=torch.randn(n, generator=g),
                        value=torch.randn(n, generator=g)))


def _reference_ppo_loss(model, batch, continuous, clip, vw, ew, adv_norm, value_clip):
    head, value = model(batch.obs)
    if continuous:
        mean, log_std = head
        std = log_std.exp()
        a = batch.raw_action
        logp = (-((a - mean) ** 2) / (2 * std ** 2) - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        entropy = (0.5 + 0.5 * np.log(2 * np.pi) + log_std).sum(-1)
    else:
        logsm = torch.log_softmax(head, -1)
        logp = logsm.gather(1, batch.action.long().unsqueeze(1)).squeeze(1)
        entropy = -(logsm.exp() * logsm).sum(-1)
    adv = batch.adv
    if adv_norm:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = torch.exp(logp - batch.logp)
    pg = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()
    if value_clip:
        vc = batch.value + torch.clamp(value - batch.value, -clip, clip)
        vl = 0.5 * torch.max((value - batch.returns) ** 2, (vc - batch.returns) ** 2).mean()
    else:
        vl = 0.5 * ((value - batch.returns) ** 2).mean()
    return pg + vw * vl - ew * entropy.mean()


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("value_clip", [False, True])
def test_ppo_loss_matches_independent_computation(continuous, value_clip):
    space = gym.spaces.Box(-2, 2, (1,), np.float32) if continuous else gym.spaces.Discrete(3)
    policy = _policy(PPOPolicy, space, value_clip=value_clip, entropy_weight=0.01)
    model = copy.deepcopy(policy._model)
    batch = _batch(continuous)
    # perturb the batch's log-probs so that some ratios fall outside the clip range
    with torch.no_grad():
        expected = _reference_ppo_loss(model, batch, continuous, 0.2, 0.5, 0.01, True, value_clip)
    out = policy.learn_mode.forward(batch)
    assert out["loss"].item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-6)


def test_a2c_loss_is_unclipped_policy_gradient():
    policy = _policy(A2CPolicy, gym.spaces.Discrete(3), adv_norm=False, entropy_weight=0.0)
    model = copy.deepcopy(policy._model)
    batch = _batch(False)
    with torch.no_grad():
        logits, value = model(batch.obs)
        logp = torch.log_softmax(logits, -1).gather(1, batch.action.long().unsqueeze(1)).squeeze(1)
        expected = -(logp * batch.adv).mean() + 0.5 * 0.5 * ((value - batch.returns) ** 2).mean()
    assert policy.learn_mode.forward(batch)["loss"].item() == pytest.approx(expected.item(), rel=1e-5)


def test_ppo_collect_returns_logp_and_value_consistent_with_model():
    policy = _policy(PPOPolicy, gym.spaces.Discrete(3))
    obs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    out = policy.collect_mode.forward(obs)
    with torch.no_grad():
        logits, value = policy._model(torch.from_numpy(obs))
        logp = torch.log_softmax(logits, -1).gather(1, torch.as_tensor(out["action"]).long().unsqueeze(1)).squeeze(1)
    assert np.allclose(out["logp"], logp.numpy(), atol=1e-6) and np.allclose(out["value"], value.numpy(), atol=1e-6)
    assert np.allclose(policy.collect_mode.value(torch.from_numpy(obs)).numpy(), value.numpy(), atol=1e-6)


def test_ppo_rejects_unsupported_action_space():
    with pytest.raises(SpaceMismatchError, match="'ppo'.*MultiBinary"):
        _policy(PPOPolicy, gym.spaces.MultiBinary(3))
