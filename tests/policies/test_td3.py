"""TD3 and DDPG (policies/td3.py): the update against an independent computation and against the paper's order
with an Adam per network, target smoothing's clip,
the policy delay, actions within the Box's bounds, the state round trip, and the errors of a wrong space or
config. The data-parallel update is compared with one process by tests/pipelines/test_check_ddp.py."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from easydict import EasyDict

from data.batch import make_batch
from engine.config import ConfigError, deep_merge
from policies import SpaceMismatchError
from policies import td3 as td3_module
from policies.td3 import DDPGPolicy, TD3Policy, smoothing_noise
from reference_updates import assert_same_as_reference  # tests/policies/, on the path as tiny_q is

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))  # scale 2 and 0.5


def _policy(cls=TD3Policy, action_space=ACT, collect=None, **learn):
    torch.manual_seed(0)
    cfg = EasyDict(deep_merge(cls.default_config(), dict(
        model=dict(actor_head_hidden_size_list=[16], critic_head_hidden_size_list=[16]), learn=learn,
        collect=collect or {})))
    return cls(cfg, OBS, action_space)


def _batch(n=6, seed=3):
    g = torch.Generator().manual_seed(seed)
    low, high = torch.as_tensor(ACT.low), torch.as_tensor(ACT.high)
    return make_batch(dict(obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g),
                           action=low + torch.rand(n, 2, generator=g) * (high - low),
                           reward=torch.randn(n, generator=g), discount=torch.full((n,), 0.99),
                           terminated=torch.tensor([False, True, False, False, True, False][:n]),
                           truncated=torch.tensor([False, False, True, False, False, False][:n])))


def _recording_noise(policy):
    """Record each update's smoothing noise (the numbers it drew), for an independent computation."""
    drawn = []
    draw = policy._smoothing_noise
    policy._smoothing_noise = lambda *shape: drawn.append(draw(*shape)) or drawn[-1]
    return drawn


def _state(module):
    return {k: v.clone() for k, v in module.state_dict().items()}


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("cls", [TD3Policy, DDPGPolicy])
def test_td3_and_ddpg_losses_match_independent_computation(cls):
    policy = _policy(cls, policy_noise=0.3, noise_clip=0.1) if cls is TD3Policy else _policy(cls)
    model, target = copy.deepcopy(policy.model), copy.deepcopy(policy._target_model)
    drawn = _recording_noise(policy)
    batch = _batch()
    out = policy.learn_mode.forward(batch)  # TD3: a critic step (the actor waits); DDPG: an actor step
    noise = drawn[0]
    with torch.no_grad():
        a = (batch.action - torch.tensor([0.0, 0.5])) / torch.tensor([2.0, 0.5])  # env units -> (-1, 1)
        a_next = (target.actor(batch.next_obs) + noise).clamp(-1, 1)
        not_term = 1.0 - batch.terminated.float()  # the truncated row still bootstraps
        q_next = target.critic(batch.next_obs, a_next)
        y = batch.reward + 0.99 * not_term * (torch.min(*q_next) if len(q_next) == 2 else q_next[0])
        q_loss = sum(F.mse_loss(q, y) for q in model.critic(batch.obs, a))
        # the actor's loss reads the critics after their step (the actor's own step leaves them as they are)
        actor_loss = -policy.model.critic(batch.obs, model.actor(batch.obs))[0].mean()
        stale = -model.critic(batch.obs, model.actor(batch.obs))[0].mean()
    if cls is TD3Policy:
        assert 0 < noise.abs().max() <= 0.1 + 1e-7  # smoothing noise of std 0.3, clipped at 0.1
        assert out["loss"].item() == pytest.approx(q_loss.item(), rel=1e-5)  # no actor pass: the critics' loss
        assert "actor_loss" not in out and all(p.grad is None for p in policy.model.actor.parameters())
    else:
        assert torch.equal(noise, torch.zeros(6, 2)) and len(q_next) == 1  # no smoothing, one critic
        assert out["loss"].item() == pytest.approx((q_loss + actor_loss).item(), rel=1e-5)
        assert out["actor_loss"].item() == pytest.approx(actor_loss.item(), rel=1e-5, abs=1e-6)
        assert out["actor_loss"].item() != pytest.approx(stale.item(), rel=1e-4)  # not the critics before it
    assert out["target_q"].item() == pytest.approx(y.mean().item(), rel=1e-5)
    assert out["q_loss"].item() == pytest.approx(q_loss.item(), rel=1e-5)


@pytest.mark.parametrize("cls, delay", [(TD3Policy, 2), (TD3Policy, 3), (DDPGPolicy, 1)])
def test_updates_equal_the_papers_order_with_an_adam_per_network(cls, delay):
    """8 updates against the TD3 paper's (and SB3's, CleanRL's) update written out with two Adams: the critics'
    step, then on actor steps the actor's loss through the critics just stepped, its step, and the targets. The
    parameters, the targets and both networks' Adam moments agree (one optimizer whose steps hold the other
    network out is two)."""
    policy = _policy(cls, actor_update_freq=delay, learning_rate_q=1e-2, learning_rate_policy=3e-3)
    model, target = copy.deepcopy(policy.model), copy.deepcopy(policy._target_model)
    critic_adam = torch.optim.Adam(model.critic.parameters(), lr=1e-2)
    actor_adam = torch.optim.Adam(model.actor.parameters(), lr=3e-3)
    drawn = _recording_noise(policy)
    for update in range(1, 9):
        batch = _batch(seed=update)
        out = policy.learn_mode.forward(batch)
        a = ((batch.action - policy._learn_bias) / policy._learn_scale).clamp(-1, 1)
        with torch.no_grad():
            a_next = (target.actor(batch.next_obs) + drawn[-1]).clamp(-1, 1)
            y = batch.reward + 0.99 * (~batch.terminated).float() * torch.min(
                torch.stack(target.critic(batch.next_obs, a_next)), dim=0).values
        q_loss = sum(F.mse_loss(q, y) for q in model.critic(batch.obs, a))
        critic_adam.zero_grad()
        q_loss.backward()
        critic_adam.step()
        assert float(out["q_loss"]) == pytest.approx(float(q_loss.detach()), rel=1e-5)
        if update % delay == 0:
            actor_loss = -model.critic(batch.obs, model.actor(batch.obs))[0].mean()
            actor_adam.zero_grad()
            actor_loss.backward()  # the critics' gradients it leaves are zeroed before their next step
            actor_adam.step()
            with torch.no_grad():
                torch._foreach_lerp_(list(target.parameters()), list(model.parameters()), policy._theta)
            assert float(out["actor_loss"]) == pytest.approx(float(actor_loss.detach()), rel=1e-5, abs=1e-6)
    assert policy.optimizer_step.updates == 8
    assert_same_as_reference(policy, [(policy.model, model), (policy._target_model, target)],
                             [(critic_adam, list(policy.model.critic.parameters()), list(model.critic.parameters())),
                              (actor_adam, list(policy.model.actor.parameters()), list(model.actor.parameters()))],
                             rtol=1e-5)


def test_target_smoothing_clips_the_noise_and_the_smoothed_action():
    """The noise lies within +-noise_clip, and pi_targ(s') + noise within the action bounds (-1, 1)."""
    g = torch.Generator().manual_seed(0)
    noise = smoothing_noise(g, 4096, 2, std=1.0, clip=0.5)
    assert noise.abs().max().item() == 0.5 and (noise.abs() == 0.5).float().mean() > 0.5  # N(0, 1): most clipped
    assert 0.2 < noise.std().item() < 0.5
    policy = _policy(policy_noise=5.0, noise_clip=1.0)
    with torch.no_grad():
        policy._target_model.actor.head.bias.fill_(3.0)  # the target actor's actions near +1
    seen = []
    real = policy._target_model.critic.forward
    policy._target_model.critic.forward = lambda obs, action: seen.append(action) or real(obs, action)
    policy.learn_mode.forward(_batch())
    assert seen and seen[0].max().item() == 1.0 and seen[0].min().item() >= -1.0


def test_the_smoothing_noise_of_each_rank_is_its_rows_of_the_joined_batchs():
    """Under DDP each rank takes its rows of the noise drawn for the global batch: two ranks of 3 rows get
    what one process gets for 6 rows, from the same learn state (so check-ddp compares exactly)."""
    policy = _policy()
    one = policy._smoothing_noise(6, 2)
    ranks = []
    for rank in range(2):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(td3_module, "get_rank", lambda: rank)
            mp.setattr(td3_module, "get_world_size", lambda: 2)
            ranks.append(policy._smoothing_noise(3, 2))
    assert torch.equal(torch.cat(ranks), one)
    policy.optimizer_step.updates += 1  # another update, other numbers
    assert not torch.equal(policy._smoothing_noise(6, 2), one)


@pytest.mark.parametrize("delay", [1, 3])
def test_the_actor_and_targets_move_every_delay_th_update_only(delay):
    """Updates delay, 2 * delay, ... move the actor and the targets; the critics move every update. An update
    after an actor step would still move the actor by Adam's momentum with a zero gradient: in one process the
    updates between have no actor pass (no gradient: Adam skips the actor), and report the last actor step's
    actor loss. The gradients left are the last step's: the actor's alone after an actor step (its pass has no
    path to the critics), the critics' alone otherwise."""
    policy = _policy(actor_update_freq=delay)
    moved, actor_losses = [], []
    for update in range(1, 7):
        actor, critic, target = _state(policy.model.actor), _state(policy.model.critic), _state(policy._target_model)
        out = policy.learn_mode.forward(_batch(seed=update))
        moved.append((not _same(actor, policy.model.actor.state_dict()),
                      not _same(critic, policy.model.critic.state_dict()),
                      not _same(target, policy._target_model.state_dict())))
        actor_step = update % delay == 0
        assert all((p.grad is None) == actor_step for p in policy.model.critic.parameters())
        assert all((p.grad is not None) == actor_step for p in policy.model.actor.parameters())
        assert policy.optimizer_step.updates == update  # two steps on an actor step, one update counted
        assert out["loss"].item() == pytest.approx(out["q_loss"].item() + actor_step * float(out.get("actor_loss", 0.0)),
                                                   rel=1e-5)
        actor_losses.append(float(out["actor_loss"]) if "actor_loss" in out else None)
    assert moved == [(u % delay == 0, True, u % delay == 0) for u in range(1, 7)]
    # the actor's loss is new on actor steps, the last one's in between (none before the first)
    assert actor_losses == [actor_losses[(u // delay) * delay - 1] if u >= delay else None for u in range(1, 7)]


def test_td3_actions_lie_within_the_box_bounds():
    """Collected (noisy and random) and evaluated actions in env units, inside an asymmetric Box."""
    policy = _policy(collect=dict(noise_sigma=2.0))
    obs = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (200, 3)).astype(np.float32))
    greedy = policy.eval_mode.forward(obs)["action"].numpy()
    noisy = policy.collect_mode.forward(obs)["action"].numpy()
    random = policy.collect_mode.forward(obs, random=True)["action"].numpy()
    for actions in (greedy, noisy, random):
        assert actions.shape == (200, 2) and actions.dtype == np.float32
        assert np.all(actions >= ACT.low) and np.all(actions <= ACT.high)
    for actions in (noisy, random):  # both reach both ends of each dimension
        assert np.all(actions.min(0) < ACT.low + 0.1 * (ACT.high - ACT.low))
        assert np.all(actions.max(0) > ACT.high - 0.1 * (ACT.high - ACT.low))
    np.testing.assert_allclose(policy.collect_mode.forward(obs, noise=0.0)["action"], greedy)


def test_td3_state_dict_round_trip_continues_identically():
    """A resumed policy (any world size: nothing in the state depends on it) makes the same next updates,
    smoothing noise included."""
    policy = _policy()
    for seed in range(3):  # odd: the next update is an actor step
        policy.learn_mode.forward(_batch(seed=seed))
    state = copy.deepcopy(policy.learn_mode.state_dict())
    assert state["updates"] == 3 and state["noise_seed"] == policy._noise_seed
    torch.manual_seed(123)  # another noise seed and other weights until the load
    copy_ = TD3Policy(policy.cfg, OBS, ACT)
    copy_.learn_mode.load_state_dict(state)
    obs = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32))
    np.testing.assert_array_equal(policy.eval_mode.forward(obs)["action"], copy_.eval_mode.forward(obs)["action"])
    for seed in (9, 10):
        a, b = policy.learn_mode.forward(_batch(seed=seed)), copy_.learn_mode.forward(_batch(seed=seed))
        assert a["loss"].item() == b["loss"].item()
    for part in ("model", "target_model"):
        theirs = copy_.learn_mode.state_dict()[part]
        assert all(torch.equal(v, theirs[k]) for k, v in policy.learn_mode.state_dict()[part].items()), part


def test_ddpg_is_td3_with_one_critic_no_delay_and_no_smoothing():
    cfg = DDPGPolicy.default_config()
    assert (cfg["model"]["twin_critic"], cfg["learn"]["actor_update_freq"], cfg["learn"]["policy_noise"]) == \
        (False, 1, 0.0)
    policy = _policy(DDPGPolicy)
    assert not any(k.startswith("critic.q2") for k in policy.model.state_dict())
    assert any(k.startswith("critic.q2") for k in _policy(TD3Policy).model.state_dict())


@pytest.mark.parametrize("cls", [TD3Policy, DDPGPolicy])
def test_a_discrete_action_space_names_the_algorithms_that_fit(cls):
    with pytest.raises(SpaceMismatchError, match=r"'(td3|ddpg)' needs a continuous \(Box\).*Discrete\(2\).*'dqn' "
                                                 r"or 'ppo'"):
        cls(EasyDict(cls.default_config()), OBS, gym.spaces.Discrete(2))


def test_an_unbounded_action_space_is_refused():
    with pytest.raises(SpaceMismatchError, match=r"'td3' needs a bounded action space"):
        _policy(action_space=gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))


@pytest.mark.parametrize("key,value,match", [
    ("actor_update_freq", 0, r"'policy.learn.actor_update_freq' is 0: it must be at least 1"),
    ("target_theta", 1.5, r"'policy.learn.target_theta' is 1.5: it must lie in \[0, 1\]"),
    ("noise_clip", -0.1, r"'policy.learn.noise_clip' is -0.1: it must be >= 0"),
])
def test_td3_value_out_of_its_rule_is_refused_at_compile_time(key, value, match):
    """The rules ``TD3Params`` declares, checked by ``check_config`` before any env starts."""
    cfg = deep_merge(TD3Policy.default_config(), dict(learn={key: value}))
    with pytest.raises(ConfigError, match=match):
        TD3Policy.check_config({"policy": cfg})


@pytest.mark.parametrize("section,key,value,match", [
    ("learn", "target_theta", 0.0, r"target_theta must lie in \(0, 1\]"),
    ("collect", "noise_sigma", -0.1, r"collect.noise_sigma must be >= 0"),
])
def test_td3_bad_config_value_names_the_key(section, key, value, match):
    """Values no rule refuses, refused when the policy is built."""
    with pytest.raises(ValueError, match=match):
        _policy(**{key: value}) if section == "learn" else _policy(collect={key: value})


def test_td3_family_examples_run():
    import doctest

    from policies import td3bc

    assert doctest.testmod(td3_module).failed == 0 and doctest.testmod(td3bc).failed == 0
