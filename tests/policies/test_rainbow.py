"""Rainbow's pieces: the C51 projection and the quantile Huber loss against hand-computed values, the
distributional losses inside the policy against an independent computation, noisy layers (a new draw per
forward, none in evaluation, no epsilon), every combination of the switches, and the refusals."""
from __future__ import annotations

import copy
import doctest
import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from data.batch import make_batch
from engine.config import ConfigError, compile_config, deep_merge
from policies import DQNPolicy, RainbowPolicy
from policies.distributional import categorical_projection, quantile_huber_loss, support
from policies.noisy import NoisyLinear, noise_off, set_noise

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
SMALL = dict(model=dict(encoder_hidden_size_list=[16]))


def _policy(cls=RainbowPolicy, **overrides):
    cfg = EasyDict(deep_merge(deep_merge(cls.default_config(), SMALL), overrides))
    return cls(cfg, OBS, ACT)


def _batch(n=4, weight=None):
    g = torch.Generator().manual_seed(0)
    return make_batch(dict(obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g),
                           action=torch.tensor([0, 1, 1, 0])[:n], reward=torch.tensor([1.0, -1.0, 0.5, 2.0])[:n],
                           terminated=torch.tensor([False, True, False, False])[:n],
                           truncated=torch.tensor([False, False, True, False])[:n],
                           discount=torch.tensor([0.9, 0.9, 0.81, 0.729])[:n],
                           weight=torch.ones(n) if weight is None else weight))


# ---- the C51 projection and the quantile Huber loss, by hand ---------------------------------------------
def test_categorical_projection_matches_a_hand_computed_case():
    """Support [-1, 0, 1], next probabilities [0.2, 0.5, 0.3]:
    - r=0.5, discount 0.5: atoms move to [0, 0.5, 1]: 0.2 onto 0; 0.5 split half-half onto 0 and 1; 0.3 onto 1;
    - terminated (discount 0), r=0.5: every atom at 0.5: all mass split half-half between 0 and 1;
    - r=2 (above the support): everything clamped onto the top atom, none lost;
    - r=-0.25, discount 1: atoms at [-1.25 -> -1, -0.25, 0.75]: -0.25 is 3/4 on 0, 1/4 on -1; 0.75 is 3/4 on 1."""
    probs = torch.tensor([[0.2, 0.5, 0.3]] * 4)
    out = categorical_projection(probs, torch.tensor([0.5, 0.5, 2.0, -0.25]), torch.tensor([0.5, 0.0, 0.9, 1.0]),
                                 -1.0, 1.0)
    expected = torch.tensor([[0.0, 0.45, 0.55],
                             [0.0, 0.5, 0.5],
                             [0.0, 0.0, 1.0],
                             [0.2 + 0.125, 0.375 + 0.075, 0.225]])
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.allclose(out.sum(-1), torch.ones(4))


def test_categorical_projection_keeps_an_on_grid_target_where_it_is():
    probs = torch.softmax(torch.randn(5, 11, generator=torch.Generator().manual_seed(1)), -1)
    z = support(-5.0, 5.0, 11)
    same = categorical_projection(probs, torch.zeros(5), torch.ones(5), -5.0, 5.0)
    assert torch.allclose(same, probs, atol=1e-6)
    shifted = categorical_projection(probs, torch.ones(5), torch.ones(5), -5.0, 5.0)  # one atom up, the top piles up
    assert torch.allclose(shifted[:, 1:-1], probs[:, :-2], atol=1e-6)
    assert torch.allclose(shifted[:, -1], probs[:, -2:].sum(-1), atol=1e-6)
    assert torch.allclose((shifted * z).sum(-1), (probs * z).sum(-1) + 1 - probs[:, -1], atol=1e-5)


def test_quantile_huber_loss_matches_a_hand_computed_case():
    """Quantiles [0, 1] at tau [0.25, 0.75], targets [0.5, 3], kappa 1: u = [[0.5, 3], [-0.5, 2]];
    huber = [[0.125, 2.5], [0.125, 1.5]]; weights |tau - 1{u<0}| = [[0.25, 0.25], [0.25, 0.75]];
    mean over targets, sum over quantiles: 0.25 * 1.3125 + (0.03125 + 1.125) / 2 = 0.90625."""
    theta = torch.tensor([[0.0, 1.0]], requires_grad=True)
    loss = quantile_huber_loss(theta, torch.tensor([[0.5, 3.0]]), kappa=1.0)
    assert loss.item() == pytest.approx(0.90625)
    # kappa 0: the pinball loss, 0.25*(0.5+3)/2 + (0.25*0.5 + 0.75*2)/2 = 0.4375 + 0.8125
    assert quantile_huber_loss(theta, torch.tensor([[0.5, 3.0]]), kappa=0.0).item() == pytest.approx(1.25)
    loss.backward()  # d/dtheta_1 = -0.25 * (0.5 + 1) / 2; d/dtheta_2 = -(-0.25*0.5 + 0.75*1) / 2
    assert torch.allclose(theta.grad, torch.tensor([[-0.1875, -0.3125]]))


def test_quantile_huber_loss_is_smallest_at_the_true_quantiles():
    samples = torch.randn(1, 4000, generator=torch.Generator().manual_seed(0))
    true = torch.quantile(samples[0], torch.tensor([0.125, 0.375, 0.625, 0.875])).unsqueeze(0)
    best = quantile_huber_loss(true, samples, kappa=0.0)
    for shift in (-0.2, 0.2):
        assert quantile_huber_loss(true + shift, samples, kappa=0.0) > best


def test_distributional_and_noisy_doctests():
    import policies.distributional
    import policies.models
    import policies.noisy

    for module in (policies.distributional, policies.noisy, policies.models):
        assert doctest.testmod(module).failed == 0, module.__name__


# ---- the losses inside the policy ------------------------------------------------------------------------
@pytest.mark.parametrize("double_q", [True, False])
def test_categorical_loss_and_priority_match_an_independent_computation(double_q):
    torch.manual_seed(0)
    policy = _policy(priority=True, priority_IS_weight=True, model=dict(noisy=False, v_min=-2.0, v_max=2.0, n_atoms=5),
                     learn=dict(double_q=double_q), other=dict(eps=dict(start=0.1, end=0.1)))
    with torch.no_grad():
        for p in policy._target_model.parameters():
            p.add_(0.3)
    online, target_net = copy.deepcopy(policy.model), copy.deepcopy(policy._target_model)
    weight = torch.tensor([1.0, 0.5, 2.0, 0.25])
    batch = _batch(weight=weight)
    z = torch.linspace(-2.0, 2.0, 5)
    with torch.no_grad():
        log_p = online(batch.obs)[torch.arange(4), batch.action]
        pick = (online(batch.next_obs) if double_q else target_net(batch.next_obs)).exp() @ z
        a_next = pick.argmax(1)
        p_next = target_net(batch.next_obs)[torch.arange(4), a_next].exp()
        m = torch.zeros(4, 5)  # the projection written out per sample and atom
        for i in range(4):
            for j in range(5):
                tz = float(batch.reward[i] + batch.discount[i] * (0.0 if batch.terminated[i] else 1.0) * z[j])
                b = (min(max(tz, -2.0), 2.0) + 2.0) / 1.0
                lo, hi = int(np.floor(b)), int(np.ceil(b))
                if lo == hi:
                    m[i, lo] += p_next[i, j]
                else:
                    m[i, lo] += p_next[i, j] * (hi - b)
                    m[i, hi] += p_next[i, j] * (b - lo)
        ce = -(m * log_p).sum(-1)
    out = policy.learn_mode.forward(batch)
    assert out["loss"].item() == pytest.approx((weight * ce).mean().item(), rel=1e-5)
    assert torch.allclose(out["priority"], ce, atol=1e-5)  # unweighted, per sample
    assert out["target_q"].item() == pytest.approx((m @ z).mean().item(), rel=1e-4, abs=1e-5)


def test_quantile_loss_matches_an_independent_computation():
    torch.manual_seed(0)
    policy = _policy(DQNPolicy, model=dict(distribution="quantile", n_atoms=4), learn=dict(double_q=True))
    online, target_net = copy.deepcopy(policy.model), copy.deepcopy(policy._target_model)
    batch = _batch()
    with torch.no_grad():
        theta = online(batch.obs)[torch.arange(4), batch.action]
        a_next = online(batch.next_obs).mean(-1).argmax(1)
        not_done = 1.0 - batch.terminated.float()
        target = batch.reward[:, None] + (batch.discount * not_done)[:, None] * target_net(batch.next_obs)[
            torch.arange(4), a_next]
        tau = torch.tensor([0.125, 0.375, 0.625, 0.875])
        expected = torch.zeros(4)
        for i in range(4):
            for q in range(4):
                for j in range(4):
                    u = float(target[i, j] - theta[i, q])
                    huber = 0.5 * u * u if abs(u) <= 1 else abs(u) - 0.5
                    expected[i] += abs(float(tau[q]) - (u < 0)) * huber / 4
    out = policy.learn_mode.forward(batch)
    assert out["loss"].item() == pytest.approx(expected.mean().item(), rel=1e-5)
    assert target[1].unique().numel() == 1  # terminated: every target quantile is the reward
    assert torch.allclose(out["priority"], expected, atol=1e-5)


# ---- noisy layers ----------------------------------------------------------------------------------------
def test_noisy_layer_draws_new_noise_each_forward_and_learns_its_scale():
    torch.manual_seed(0)
    layer = NoisyLinear(5, 3)
    x = torch.randn(4, 5)
    a, b = layer(x), layer(x)
    assert not torch.allclose(a, b)
    w_noise = a - torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    assert w_noise.abs().max() > 0
    a.sum().backward()
    assert layer.weight_sigma.grad.abs().sum() > 0 and layer.bias_sigma.grad.abs().sum() > 0
    assert set(layer.state_dict()) == {"weight_mu", "weight_sigma", "bias_mu", "bias_sigma"}  # no noise kept
    assert list(layer.buffers()) == []  # DDP would broadcast rank 0's buffers: the noise is no buffer
    with noise_off(layer):
        mean = layer(x)
        assert torch.equal(mean, torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu))
    assert layer.noise  # restored
    layer.zero_grad()
    set_noise(layer, False)
    layer(x).sum().backward()  # off: sigma in the graph with a zero gradient (DDP sees it used)
    assert layer.weight_sigma.grad is not None and layer.weight_sigma.grad.abs().sum() == 0


def test_noisy_policy_explores_without_epsilon_and_evaluates_on_the_mean():
    torch.manual_seed(0)
    policy = _policy(model=dict(encoder_hidden_size_list=[32]))
    assert policy.cfg.other.eps.start == 0 and policy.cfg.other.eps.end == 0  # rainbow's defaults: no epsilon
    obs = torch.from_numpy(np.random.default_rng(0).standard_normal((256, 3)).astype(np.float32))
    collected = [policy.collect_mode.forward(obs, eps=0.0)["action"] for _ in range(5)]
    assert any((c != collected[0]).any() for c in collected[1:])  # new noise, other greedy actions
    evaluated = [policy.eval_mode.forward(obs)["action"] for _ in range(3)]
    assert all((e == evaluated[0]).all() for e in evaluated)
    assert policy.model.torso[0].noise  # evaluation left the noise on for collection
    set_noise(policy.model, False)
    with torch.no_grad():  # evaluation acted on the mean weights
        assert (policy.model.expectation(policy.model(obs)).argmax(1)
                == evaluated[0]).all()



@pytest.mark.parametrize("distribution,noisy", [("categorical", True), ("quantile", False), ("none", True)])
def test_greedy_module_acts_as_the_eval_mode(distribution, noisy):
    """What ``baton export`` writes: the argmax of the expected values (not of a distribution's atoms), on the
    noisy layers' mean weights (the same action at every call), leaving the live network's noise on."""
    torch.manual_seed(0)
    policy = _policy(model=dict(distribution=distribution, noisy=noisy, n_atoms=5),
                     other=dict(eps=dict(start=0.0 if noisy else 0.5, end=0.0 if noisy else 0.05)))
    obs = torch.from_numpy(np.random.default_rng(1).standard_normal((64, 3)).astype(np.float32))
    greedy = policy.greedy_module()
    first = greedy(obs)
    assert first.shape == (64,) and torch.equal(first, greedy(obs))
    assert torch.equal(first, policy.eval_mode.forward(obs)["action"])
    assert not noisy or policy.model.torso[0].noise

def test_set_noise_reaches_every_model_of_the_policy():
    policy = _policy()
    assert policy.set_noise(False)
    layers = [m for model in (policy.model, policy._target_model) for m in model.modules()
              if isinstance(m, NoisyLinear)]
    assert layers and not any(layer.noise for layer in layers)
    assert not _policy(model=dict(noisy=False), other=dict(eps=dict(start=0.5))).set_noise(False)


# ---- every combination -----------------------------------------------------------------------------------
COMBINATIONS = list(itertools.product(["none", "categorical", "quantile"], [False, True], [False, True],
                                      [False, True], [False, True]))


@pytest.mark.parametrize("distribution,noisy,dueling,double_q,priority", COMBINATIONS,
                         ids=["-".join(map(str, c)) for c in COMBINATIONS])
def test_every_combination_learns_acts_and_round_trips(distribution, noisy, dueling, double_q, priority):
    policy = _policy(DQNPolicy, priority=priority, priority_IS_weight=priority,
                     model=dict(distribution=distribution, noisy=noisy, dueling=dueling, n_atoms=3),
                     learn=dict(double_q=double_q), other=dict(eps=dict(start=0.0 if noisy else 0.5,
                                                                        end=0.0 if noisy else 0.05)))
    before = copy.deepcopy(policy.model.state_dict())
    out = policy.learn_mode.forward(_batch())
    assert torch.isfinite(out["loss"]) and out["priority"].shape == (4,) and (out["priority"] >= 0).all()
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    obs = torch.zeros(2, 3)
    assert policy.collect_mode.forward(obs, eps=0.0)["action"].shape == (2,)
    assert policy.eval_mode.forward(obs)["action"].shape == (2,)
    one = torch.tensor([0.5, -0.2, 0.1])  # one observation, unbatched: its action, unbatched (as PPO and SAC act)
    assert torch.equal(policy.eval_mode.forward(one)["action"], policy.eval_mode.forward(one[None])["action"][0])
    other = _policy(DQNPolicy, priority=priority, priority_IS_weight=priority,
                    model=dict(distribution=distribution, noisy=noisy, dueling=dueling, n_atoms=3),
                    learn=dict(double_q=double_q), other=dict(eps=dict(start=0.0 if noisy else 0.5,
                                                                       end=0.0 if noisy else 0.05)))
    other.load_state_dict(policy.state_dict())
    assert (other.eval_mode.forward(torch.ones(8, 3))["action"]
            == policy.eval_mode.forward(torch.ones(8, 3))["action"]).all()


# ---- refusals --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides,message", [
    (dict(model=dict(v_min=5.0, v_max=5.0)), r"v_min=5.0 must be below policy.model.v_max=5.0"),
    (dict(model=dict(v_min=1.0, v_max=-1.0)), r"v_min=1.0 must be below"),
    (dict(model=dict(n_atoms=1)), r"n_atoms=1: a categorical head needs at least 2 atoms"),
    (dict(model=dict(distribution="quantile", n_atoms=0)), r"n_atoms=0: a quantile head needs at least 2"),
    (dict(other=dict(eps=dict(start=0.5))), r"noisy=True explores through its noisy layers.*start=0.5.*"
                                            r"set policy.other.eps.start=0 and policy.other.eps.end=0"),
    (dict(other=dict(eps=dict(end=0.01))), r"an epsilon-greedy schedule on top .* is refused"),
    (dict(learn=dict(td_loss="mse")), r"td_loss='mse' applies to a scalar Q head; a categorical head"),
    (dict(model=dict(distribution="quantile"), learn=dict(quantile_kappa=-1.0)), r"'policy.learn.quantile_kappa' is -1.0: it must be >= 0"),
    (dict(model=dict(distribution="gaussian")), r"distribution='gaussian' is not one of"),
])
def test_rainbow_refuses_what_it_cannot_mean(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _policy(**overrides)
    main = dict(exp_name="x", policy=deep_merge(deep_merge(RainbowPolicy.default_config(), SMALL), overrides))
    # and at compile time, before any env starts
    with pytest.raises(ConfigError, match=message):
        compile_config(main, dict(env=dict(type="cartpole"), policy=dict(type="rainbow")), save=False)


def test_rainbow_without_noise_takes_an_epsilon_schedule_and_a_scalar_head():
    policy = _policy(model=dict(noisy=False, distribution="none"), other=dict(eps=dict(start=1.0, end=0.05)))
    assert torch.isfinite(policy.learn_mode.forward(_batch())["loss"])
    assert policy.model.host_acting  # a plain MLP again: the lean acting path on the CPU


# ---- checkpoint and resume through the pipeline ----------------------------------------------------------
def test_rainbow_run_resumes_its_models_and_prioritized_replay(tmp_path):
    from dizoo.classic_control.cartpole.config.cartpole_rainbow_config import create_config, main_config
    from pipelines import build_pipeline

    main = copy.deepcopy(main_config)
    main.log = EasyDict(dict(progress=False, tensorboard=False))
    main.ckpt = EasyDict(dict(save_replay_buffer=True))
    main.env.update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1, stop_value=1e9)
    main.policy.collect.n_sample = 32
    main.policy.learn.update_per_collect = 2
    main.policy.random_collect_size = 0
    run = str(tmp_path / "run")
    first = build_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=128, exp_name=run)
    first.run()
    state = copy.deepcopy(first.policy.state_dict())
    priorities = first.buffer.sampler.state_dict()
    second = build_pipeline((main, copy.deepcopy(create_config)), seed=0, max_env_step=192, exp_name=run, resume=True)
    assert second.policy.optimizer_step.updates == state["updates"] > 0
    for key in ("model", "target_model"):
        ours = second.policy.state_dict()[key]
        assert all(torch.equal(ours[name], value) for name, value in state[key].items())
    restored = second.buffer.sampler.state_dict()
    assert len(second.buffer) == len(first.buffer) > 0
    assert restored["max_priority"] == priorities["max_priority"] != 1.0  # learned priorities, not the initial
    assert torch.equal(restored["tree"]["sum"], priorities["tree"]["sum"])
    summary = second.run()
    assert summary["env_step"] >= 192 and second.policy.optimizer_step.updates > state["updates"]
