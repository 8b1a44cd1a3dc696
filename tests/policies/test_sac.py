"""SAC's target and losses against an independent computation."""
from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from engine.config import ConfigError, deep_merge
from data.batch import make_batch
from policies import SACPolicy, SpaceMismatchError
from policies.sac import sac_target

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _policy(**learn):
    torch.manual_seed(0)
    cfg = EasyDict(deep_merge(SACPolicy.default_config(), dict(
        model=dict(actor_head_hidden_size_list=[32], critic_head_hidden_size_list=[32]), learn=learn)))
    return SACPolicy(cfg, OBS, ACT)


def _batch(n=6):
    g = torch.Generator().manual_seed(3)
    return make_batch(dict(obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g),
                        action=torch.rand(n, 1, generator=g) * 4 - 2, reward=torch.randn(n, generator=g),
                        terminated=torch.tensor([False, True, False, False, True, False]),
                        truncated=torch.tensor([False, False, True, False, False, False]),
                        discount=torch.full((n,), 0.99), weight=torch.ones(n)))


def test_sac_target_formula():
    r, d = torch.tensor([1.0, 2.0]), torch.tensor([0.9, 0.9])
    term = torch.tensor([False, True])
    q1, q2, logp = torch.tensor([3.0, 5.0]), torch.tensor([4.0, 1.0]), torch.tensor([-1.0, 0.5])
    target = sac_target(r, d, term, q1, q2, logp, alpha=0.2)
    assert target.tolist() == pytest.approx([1.0 + 0.9 * (3.0 + 0.2), 2.0])


def _independent_sample(actor, obs, noise):
    mean, log_std = actor(obs)
    std = log_std.exp()
    u = mean + std * noise
    a = torch.tanh(u)
    normal_logp = torch.distributions.Normal(mean, std).log_prob(u).sum(-1)
    return a, normal_logp - torch.log(1 - a.pow(2) + 1e-12).sum(-1)


def test_sac_losses_match_independent_computation():
    policy = _policy(auto_alpha=True, alpha=0.3)
    model = copy.deepcopy(policy.model)
    target_critic = copy.deepcopy(policy._target_critic)
    batch = _batch()
    torch.manual_seed(42)
    out = policy.learn_mode.forward(batch)
    torch.manual_seed(42)  # the same noise, drawn in the same order: next_obs first, then obs
    noise_next = torch.randn(6, 1)
    noise_now = torch.randn(6, 1)
    with torch.no_grad():
        alpha = 0.3
        a_next, logp_next = _independent_sample(model.actor, batch.next_obs, noise_next)
        tq1, tq2 = target_critic(batch.next_obs, a_next)
        not_term = 1.0 - batch.terminated.float()  # the truncated row still bootstraps
        target = batch.reward + 0.99 * not_term * (torch.min(tq1, tq2) - alpha * logp_next)
        q1, q2 = model.critic(batch.obs, batch.action / 2.0)  # env units -> (-1, 1)
        q_loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
        a_now, logp_now = _independent_sample(model.actor, batch.obs, noise_now)
        policy_loss = (alpha * logp_now - torch.min(*model.critic(batch.obs, a_now))).mean()
        alpha_loss = -(math.log(alpha) * (logp_now + (-1.0))).mean()
    assert out["target_q"].item() == pytest.approx(target.mean().item(), rel=1e-4)
    assert out["q_loss"].item() == pytest.approx(q_loss.item(), rel=1e-4)
    assert out["policy_loss"].item() == pytest.approx(policy_loss.item(), rel=1e-4, abs=1e-5)
    assert out["loss"].item() == pytest.approx((q_loss + policy_loss + alpha_loss).item(), rel=1e-4)


def test_sac_policy_loss_does_not_move_the_critic():
    policy = _policy(auto_alpha=False)
    policy.optimizer_step.optimizer.param_groups[0]["lr"] = 0.0  # the critic's: only the actor's loss could move it
    critic_before = copy.deepcopy(policy.model.critic.state_dict())
    actor_before = copy.deepcopy(policy.model.actor.state_dict())
    policy.learn_mode.forward(_batch())
    assert all(torch.equal(critic_before[k], v) for k, v in policy.model.critic.state_dict().items())
    assert any(not torch.equal(actor_before[k], v) for k, v in policy.model.actor.state_dict().items())


def test_sac_actions_within_bounds_and_random_warmup():
    policy = _policy()
    obs = torch.zeros(100, 3)
    for out in (policy.collect_mode.forward(obs), policy.collect_mode.forward(obs, random=True),
                policy.eval_mode.forward(obs)):
        assert out["action"].shape == (100, 1) and bool((out["action"].abs() <= 2.0).all())
    assert policy.collect_mode.forward(obs, random=True)["action"].std() > 0.5


def test_sac_rejects_discrete_env():
    with pytest.raises(SpaceMismatchError, match="'sac'.*continuous.*Discrete"):
        SACPolicy(EasyDict(SACPolicy.default_config()), OBS, gym.spaces.Discrete(2))


@pytest.mark.parametrize("key,value,match", [
    ("alpha", 0.0, r"'policy.learn.alpha' is 0.0: it must be > 0"),   # its log is the parameter
    ("learning_rate_alpha", 0.0, r"'policy.learn.learning_rate_alpha' is 0.0: a learning rate must be > 0"),
    ("target_theta", 1.5, r"'policy.learn.target_theta' is 1.5: it must lie in \[0, 1\]"),
])
def test_sac_value_out_of_its_rule_is_refused_at_compile_time(key, value, match):
    """The rules ``SACParams`` declares, checked by ``check_config`` before any env starts."""
    cfg = deep_merge(SACPolicy.default_config(), dict(learn={key: value}))
    with pytest.raises(ConfigError, match=match):
        SACPolicy.check_config({"policy": cfg})
