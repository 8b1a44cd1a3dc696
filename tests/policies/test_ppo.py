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
    model = copy.deepcopy(policy.model)
    batch = _batch(continuous)
    # perturb the batch's log-probs so that some ratios fall outside the clip range
    with torch.no_grad():
        expected = _reference_ppo_loss(model, batch, continuous, 0.2, 0.5, 0.01, True, value_clip)
    out = policy.learn_mode.forward(batch)
    assert out["loss"].item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-6)


def test_a2c_loss_is_unclipped_policy_gradient():
    policy = _policy(A2CPolicy, gym.spaces.Discrete(3), adv_norm=False, entropy_weight=0.0)
    model = copy.deepcopy(policy.model)
    batch = _batch(False)
    with torch.no_grad():
        logits, value = model(batch.obs)
        logp = torch.log_softmax(logits, -1).gather(1, batch.action.long().unsqueeze(1)).squeeze(1)
        expected = -(logp * batch.adv).mean() + 0.5 * 0.5 * ((value - batch.returns) ** 2).mean()
    assert policy.learn_mode.forward(batch)["loss"].item() == pytest.approx(expected.item(), rel=1e-5)


def test_ppo_collect_returns_logp_and_value_consistent_with_model():
    policy = _policy(PPOPolicy, gym.spaces.Discrete(3))
    obs = torch.from_numpy(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    out = policy.collect_mode.forward(obs)
    with torch.no_grad():
        logits, value = policy.model(obs)
        logp = torch.log_softmax(logits, -1).gather(1, torch.as_tensor(out["action"]).long().unsqueeze(1)).squeeze(1)
    assert np.allclose(out["logp"], logp.numpy(), atol=1e-6) and np.allclose(out["value"], value.numpy(), atol=1e-6)
    assert np.allclose(policy.collect_mode.value(obs).numpy(), value.numpy(), atol=1e-6)


def test_ppo_rejects_unsupported_action_space():
    with pytest.raises(SpaceMismatchError, match="'ppo'.*MultiBinary"):
        _policy(PPOPolicy, gym.spaces.MultiBinary(3))


def test_adaptive_rule_is_rl_games():
    from policies.lr_schedules import adaptive_lr
    assert adaptive_lr(1e-3, 0.004, 0.01) == pytest.approx(1.5e-3)     # under threshold / 2: up
    assert adaptive_lr(1e-3, 0.021, 0.01) == pytest.approx(1e-3 / 1.5)  # over 2 * threshold: down
    assert adaptive_lr(1e-3, 0.006, 0.01) == 1e-3 and adaptive_lr(1e-3, 0.019, 0.01) == 1e-3
    assert adaptive_lr(8e-3, 0.0, 0.01) == 1e-2 and adaptive_lr(1.2e-6, 1.0, 0.01) == 1e-6


def _kl_of(policy, batch):
    with torch.no_grad():
        logits, _ = policy.model(batch.obs)
        logp = torch.log_softmax(logits, -1).gather(1, batch.action.long().unsqueeze(1)).squeeze(1)
        ratio = (logp - batch.logp).exp()
        return float(((ratio - 1) - (logp - batch.logp)).mean())


@pytest.mark.parametrize("threshold, factor", [(1e3, 1.5), (1e-6, 1 / 1.5)])
def test_adaptive_learning_rate_follows_the_epochs_mean_kl(threshold, factor):
    """A KL far under the threshold raises the rate by 1.5 at the epoch's end, one far over lowers it; the rate
    reached survives a checkpoint round trip, where a constant schedule leaves the config's rate alone."""
    policy = _policy(PPOPolicy, gym.spaces.Discrete(3), lr_schedule="adaptive", kl_threshold=threshold)
    batch = _batch(False)
    kls = []
    for _ in range(2):
        kls.append(_kl_of(policy, batch))
        out = policy.learn_mode.forward(batch)
        assert out["learning_rate"] == pytest.approx(3e-4)
    assert kls[1] > 0  # the k3 estimate the schedule reads (the first one is the batch's perturbed log-probs)
    policy.learn_mode.end_epoch()
    assert policy.optimizer_step.optimizer.param_groups[0]["lr"] == pytest.approx(3e-4 * factor)
    policy.learn_mode.end_epoch()  # no update since: nothing to steer by
    assert policy.optimizer_step.optimizer.param_groups[0]["lr"] == pytest.approx(3e-4 * factor)
    state = policy.state_dict()
    resumed = _policy(PPOPolicy, gym.spaces.Discrete(3), lr_schedule="adaptive", kl_threshold=threshold)
    resumed.load_state_dict(state)
    assert resumed.optimizer_step.optimizer.param_groups[0]["lr"] == pytest.approx(3e-4 * factor)


def test_constant_schedule_keeps_the_learning_rate():
    policy = _policy(PPOPolicy, gym.spaces.Discrete(3))
    out = policy.learn_mode.forward(_batch(False))
    policy.learn_mode.end_epoch()
    assert "learning_rate" not in out and policy.optimizer_step.optimizer.param_groups[0]["lr"] == 3e-4


def test_lr_schedule_settings_are_checked_at_compile_time():
    from engine.config import ConfigError, compile_config
    base = dict(exp_name="x", env=dict(), policy=dict())
    create = dict(env=dict(type="cartpole"), policy=dict(type="ppo"))
    with pytest.raises(ConfigError, match="lr_schedule='cosine' is not one of 'constant', 'adaptive', 'linear'"):
        compile_config(deep_merge(base, dict(policy=dict(learn=dict(lr_schedule="cosine")))), create, save=False)
    with pytest.raises(ConfigError, match="'policy.learn.kl_threshold' is 0.0: it must be > 0"):
        compile_config(deep_merge(base, dict(policy=dict(learn=dict(lr_schedule="adaptive", kl_threshold=0.0)))),
                       create, save=False)


def test_the_linear_schedule_anneals_to_zero_at_the_budget_and_reports_its_rate():
    policy = _policy(PPOPolicy, gym.spaces.Discrete(3), lr_schedule="linear", learning_rate=1e-3)
    assert policy.anneals_learning_rate
    rates = []
    for fraction in (0.0, 0.25, 1.0, 1.5):
        policy.anneal_learning_rate(fraction)
        rates.append(policy.optimizer_step.optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([1e-3, 7.5e-4, 0.0, 0.0])
    policy.anneal_learning_rate(0.5)
    assert policy.learn_mode.forward(_batch(False))["learning_rate"] == pytest.approx(5e-4)
    assert not _policy(PPOPolicy, gym.spaces.Discrete(3)).anneals_learning_rate


def test_settings_under_policy_other_that_ppo_does_not_read_are_warned_of(monkeypatch, caplog):
    """``policy.other`` is free-form for the on-policy algorithms (DI-engine configs keep a replay buffer and an
    epsilon there): whatever it holds changes nothing, and the run says so once."""
    import logging

    import policies.accel

    monkeypatch.setattr(policies.accel, "_WARNED", set())
    cfg = EasyDict(deep_merge(PPOPolicy.default_config(), dict(other=dict(replay_buffer=dict(her=dict(k=4))))))
    with caplog.at_level(logging.WARNING, logger="policies.accel"):
        PPOPolicy(cfg, OBS, gym.spaces.Discrete(2))
        PPOPolicy(EasyDict(PPOPolicy.default_config()), OBS, gym.spaces.Discrete(2))  # nothing there: no warning
    assert [r.getMessage() for r in caplog.records] == [
        "policy.other holds ['replay_buffer'], which PPO does not read (it has no replay buffer and no exploration "
        "schedule): these settings change nothing; remove them"]
