"""SAC's target and losses against an independent computation."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from engine.config import ConfigError, deep_merge
from data.batch import make_batch
from policies import SACPolicy, SpaceMismatchError
from policies import sac as sac_module
from policies.sac import sac_target
from reference_updates import assert_same_as_reference  # tests/policies/, on the path as tiny_q is

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _policy(**learn):
    torch.manual_seed(0)
    cfg = EasyDict(deep_merge(SACPolicy.default_config(), dict(
        model=dict(actor_head_hidden_size_list=[32], critic_head_hidden_size_list=[32]), learn=learn)))
    return SACPolicy(cfg, OBS, ACT)


def _batch(n=6, seed=3):
    g = torch.Generator().manual_seed(seed)
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


@pytest.mark.parametrize("ddp_zeros", [False, True])
@pytest.mark.parametrize("auto_alpha", [True, False])
def test_updates_equal_sb3s_order_with_an_adam_per_network(auto_alpha, ddp_zeros, monkeypatch):
    """8 updates against SAC's update in SB3's order written out with an Adam per network: the critics' loss
    and step, then the actor's loss through the critics just stepped (and the temperature's loss) and their
    steps, the whole update weighing entropy by the temperature it started with; then the targets. Losses,
    parameters, targets and every Adam moment agree (one optimizer whose steps hold the others out is three).
    ``ddp_zeros``: each pass gives the networks it does not use a zero gradient, as under DDP, which Adam would
    move by their momentum unless the step holds them out."""
    if ddp_zeros:
        monkeypatch.setattr(sac_module, "zero_for_ddp", lambda model, params: 0.0 * sum(p.sum() for p in params))
    policy = _policy(auto_alpha=auto_alpha, alpha=0.3, learning_rate_q=1e-2, learning_rate_policy=3e-3,
                     learning_rate_alpha=1e-2)
    model, target_critic = copy.deepcopy(policy.model), copy.deepcopy(policy._target_critic)
    nets = [(list(policy.model.critic.parameters()), list(model.critic.parameters()), 1e-2),
            (list(policy.model.actor.parameters()), list(model.actor.parameters()), 3e-3)]
    if auto_alpha:
        nets.append(([policy.model.log_alpha], [model.log_alpha], 1e-2))
    adams = [(torch.optim.Adam(theirs, lr=lr), mine, theirs) for mine, theirs, lr in nets]
    for update in range(8):
        batch = _batch(seed=update)
        torch.manual_seed(100 + update)
        out = policy.learn_mode.forward(batch)
        torch.manual_seed(100 + update)  # the same noise, drawn in the same order: next_obs first, then obs
        noise_next, noise_now = torch.randn(6, 1), torch.randn(6, 1)
        alpha = model.log_alpha.detach().exp()
        with torch.no_grad():
            a_next, logp_next = _independent_sample(model.actor, batch.next_obs, noise_next)
            not_term = 1.0 - batch.terminated.float()  # the truncated row still bootstraps
            target = batch.reward + 0.99 * not_term * (torch.min(*target_critic(batch.next_obs, a_next))
                                                       - alpha * logp_next)
        q1, q2 = model.critic(batch.obs, batch.action / 2.0)  # env units -> (-1, 1)
        q_loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
        adams[0][0].zero_grad()
        q_loss.backward()
        adams[0][0].step()
        a_now, logp_now = _independent_sample(model.actor, batch.obs, noise_now)
        policy_loss = (alpha * logp_now - torch.min(*model.critic(batch.obs, a_now))).mean()
        alpha_loss = -(model.log_alpha * (logp_now.detach() - 1.0)).mean()  # target entropy -action_dim
        for adam, _, _ in adams[1:]:
            adam.zero_grad()
        (policy_loss + alpha_loss * auto_alpha).backward()  # the critics' gradients: zeroed before their step
        for adam, _, _ in adams[1:]:
            adam.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(target_critic.parameters()), list(model.critic.parameters()), 0.005)
        assert float(out["q_loss"]) == pytest.approx(float(q_loss.detach()), rel=1e-4)
        assert float(out["policy_loss"]) == pytest.approx(float(policy_loss.detach()), rel=1e-4, abs=1e-5)
        assert float(out["alpha"]) == pytest.approx(float(alpha), rel=1e-6)
        expected = q_loss + policy_loss + (alpha_loss if auto_alpha else 0.0)
        assert float(out["loss"]) == pytest.approx(float(expected.detach()), rel=1e-4, abs=1e-5)
    assert policy.optimizer_step.updates == 8
    assert_same_as_reference(policy, [(policy.model, model), (policy._target_critic, target_critic)], adams, rtol=1e-4)


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


def test_acting_draws_sample_s_action_from_the_same_random_numbers():
    model = _policy().model
    obs = torch.randn(5, 3)
    torch.manual_seed(7)
    action, _ = model.sample(obs)
    after_sample = torch.get_rng_state()
    torch.manual_seed(7)
    acted = model.sample_action(obs)
    assert torch.equal(acted, action) and torch.equal(torch.get_rng_state(), after_sample)
