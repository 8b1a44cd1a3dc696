"""Observation normalisation (policies.obs_norm, ``policy.obs_norm=True``): the running moments against numpy,
what updates them (collection only) and what does not (evaluation), the state a checkpoint carries, the
exported module, and the refusals."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from data.batch import make_batch
from engine.config import deep_merge
from policies import PPOPolicy, SACPolicy
from policies.td3 import TD3Policy
from policies.base import ObsNormMismatchError
from policies.dqn import DQNPolicy
from policies.obs_norm import RunningObsNorm, combine_moments
from policies.td3bc import TD3BCPolicy

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
SMALL = dict(actor_head_hidden_size_list=[8, 8], critic_head_hidden_size_list=[8, 8])


def _policy(cls=PPOPolicy, obs_space=OBS, action_space=BOX, **extra):
    model = dict(SMALL) if "actor_head_hidden_size_list" in cls.default_config()["model"] else {}
    cfg = EasyDict(deep_merge(cls.default_config(), dict(obs_norm=True, model=model, **extra)))
    torch.manual_seed(0)
    return cls(cfg, obs_space, action_space)


def _data(seed=0, rows=(5, 1, 17)):
    """Batches of observations with means and scales far from 0 and 1, as a MuJoCo task's are."""
    rng = np.random.default_rng(seed)
    return [torch.from_numpy((rng.normal(size=(n, 3)) * [1.0, 50.0, 1e-3] + [100.0, -3.0, 0.5]).astype(np.float32))
            for n in rows]


def test_merged_moments_are_numpy_mean_and_variance_of_everything_observed():
    norm = RunningObsNorm((3,))
    batches = _data()
    norm.observe(batches[0])
    norm.merge()
    for batch in batches[1:]:  # several observations between merges, and merges without any
        norm.observe(batch)
    norm.merge()
    norm.merge()
    joined = np.concatenate(batches).astype(np.float64)
    assert float(norm.count) == len(joined)
    np.testing.assert_allclose(norm.mean.numpy(), joined.mean(0), rtol=1e-12)
    np.testing.assert_allclose(norm.var().numpy(), joined.var(0), rtol=1e-9)
    obs = torch.as_tensor(joined[:4], dtype=torch.float32)
    expected = np.clip((joined[:4] - joined.mean(0)) / np.sqrt(joined.var(0) + 1e-8), -10, 10)
    np.testing.assert_allclose(norm(obs).numpy(), expected, rtol=1e-4, atol=1e-4)


def test_combine_moments_of_an_empty_set_changes_nothing():
    n, mean, m2 = torch.tensor(3.0, dtype=torch.float64), torch.tensor([1.0, 2.0]).double(), torch.tensor([4.0, 5.0]).double()
    zero = torch.zeros((), dtype=torch.float64)
    for got, want in zip(combine_moments(n, mean, m2, zero, torch.zeros(2).double(), torch.zeros(2).double()),
                         (n, mean, m2)):
        assert torch.equal(got, want)


def test_normalised_values_are_clipped_and_identity_before_any_merge():
    norm = RunningObsNorm((1,), clip=2.0)
    assert torch.equal(norm(torch.tensor([[0.5], [-7.0]])), torch.tensor([[0.5], [-2.0]]))  # mean 0, var 1
    norm.observe(np.array([[0.0], [2.0]]))
    norm.merge()  # mean 1, var 1
    assert torch.allclose(norm(torch.tensor([[1.0], [100.0], [-100.0]])), torch.tensor([[0.0], [2.0], [-2.0]]))


@pytest.mark.parametrize("clip", [0.0, -1.0, float("inf")])  # NaN and strings: the config's own type check
def test_a_bad_clip_value_is_refused_naming_the_key(clip):
    with pytest.raises(ValueError, match=r"policy.obs_norm_clip.*(must be a finite number > 0|must be > 0)"):
        _policy(obs_norm_clip=clip)


@pytest.mark.parametrize("cls", [PPOPolicy, SACPolicy, TD3Policy])
def test_collection_updates_the_statistics_evaluation_does_not(cls):
    policy = _policy(cls)
    batches = _data()
    policy.eval_mode.forward(batches[0])
    policy.merge_statistics()
    assert float(policy.normalisation.obs_norm.count) == 0  # evaluation never updates them
    policy.collect_mode.forward(batches[1], random=True) if cls is not PPOPolicy else \
        policy.collect_mode.forward(batches[1])  # a random warm-up step is collected too
    policy.collect_mode.forward(batches[2])
    before = policy.eval_mode.forward(batches[0])["action"]
    policy.merge_statistics()
    assert float(policy.normalisation.obs_norm.count) == len(batches[1]) + len(batches[2])
    after = policy.eval_mode.forward(batches[0])["action"]
    assert not np.allclose(before, after)  # the networks now see normalised observations


def test_the_learner_sees_observations_normalised_as_the_collector_saw_them():
    """PPO: within an iteration the statistics are constant, so the first update's ratio is exactly 1."""
    policy = _policy(PPOPolicy, learn=dict(grad_clip_value=0.0))
    warm = _data(1, rows=(64,))[0]
    policy.collect_mode.forward(warm)
    policy.merge_statistics()
    obs = _data(2, rows=(16,))[0]
    out = policy.collect_mode.forward(obs)  # observed, not merged: the learner uses the same statistics
    batch = make_batch(dict(obs=torch.as_tensor(obs), raw_action=torch.as_tensor(out["raw_action"]),
                            action=torch.as_tensor(out["action"]), logp=torch.as_tensor(out["logp"]),
                            adv=torch.randn(16), returns=torch.randn(16), value=torch.as_tensor(out["value"])))
    stats = policy.learn_mode.forward(batch)
    assert float(stats["approx_kl"]) == pytest.approx(0.0, abs=1e-6) and float(stats["clipfrac"]) == 0.0


def test_the_statistics_travel_with_the_state_and_the_acting_weights():
    policy = _policy(SACPolicy)
    for batch in _data():
        policy.collect_mode.forward(batch)
    policy.merge_statistics()
    obs = _data(3)[2]
    expected = policy.eval_mode.forward(obs)["action"]
    state = policy.learn_mode.state_dict()
    assert float(state["obs_norm"]["count"]) == 23
    restored = _policy(SACPolicy)
    restored.learn_mode.load_state_dict(state)
    np.testing.assert_allclose(restored.eval_mode.forward(obs)["action"], expected, rtol=1e-6)
    copy = _policy(SACPolicy)
    copy.load_acting_weights(policy.acting_weights())  # the background evaluator's copy
    np.testing.assert_allclose(copy.eval_mode.forward(obs)["action"], expected, rtol=1e-6)


@pytest.mark.parametrize("cls", [PPOPolicy, SACPolicy, TD3Policy])
def test_the_greedy_module_normalises_as_the_eval_mode(cls):
    policy = _policy(cls)
    for batch in _data():
        policy.collect_mode.forward(batch)
    policy.merge_statistics()
    obs = _data(4)[2]
    module = torch.jit.trace(policy.greedy_module(), (torch.as_tensor(obs[:2]),))  # as baton export does
    np.testing.assert_allclose(module(torch.as_tensor(obs)).numpy(), policy.eval_mode.forward(obs)["action"],
                               rtol=1e-5, atol=1e-6)


def test_a_checkpoint_without_statistics_and_the_reverse_are_refused_naming_the_fix():
    with_norm = _policy(TD3Policy)
    cfg = EasyDict(deep_merge(TD3Policy.default_config(), dict(model=dict(SMALL))))
    without = TD3Policy(cfg, OBS, BOX)
    with pytest.raises(ObsNormMismatchError, match=r"holds no observation-normalisation statistics.*"
                                                   r"policy.obs_norm=false"):
        with_norm.learn_mode.load_state_dict(without.learn_mode.state_dict())
    with pytest.raises(ObsNormMismatchError, match=r"holds observation-normalisation statistics.*policy.obs_norm=true"):
        without.learn_mode.load_state_dict(with_norm.learn_mode.state_dict())


def test_policies_that_cannot_normalise_refuse_the_switch():
    with pytest.raises(ValueError, match="DQNPolicy does not normalise observations.*policy.obs_norm=False"):
        _policy(DQNPolicy, action_space=gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="learns offline from a dataset"):
        _policy(TD3BCPolicy)
    with pytest.raises(ValueError, match="needs flat Box observations"):
        _policy(PPOPolicy, obs_space=gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), action_space=gym.spaces.Discrete(3))


# ---- PPO's reward scaling (policy.reward_norm) ---------------------------------------------------------
def _ppo_reward_norm(**extra):
    cfg = EasyDict(deep_merge(PPOPolicy.default_config(), dict(reward_norm=True, discount_factor=0.5,
                                                               model=dict(SMALL), **extra)))
    return PPOPolicy(cfg, OBS, BOX)


def test_rewards_are_divided_by_the_std_of_discounted_returns_that_restart_after_an_episode_end():
    policy = _ppo_reward_norm()
    reward = torch.tensor([[1.0, 4.0], [2.0, 4.0], [3.0, 4.0]])
    done = torch.tensor([[False, False], [True, False], [False, False]])
    first = policy.scale_rewards(reward, done)
    assert torch.equal(first, reward)  # nothing merged yet: the identity
    policy.merge_statistics()
    # SB3's VecNormalize: G = gamma G + r, set to 0 after done; env 0: 1, 2.5, (end) 3; env 1: 4, 6, 7
    returns = np.array([1.0, 4.0, 2.5, 6.0, 3.0, 7.0])
    assert float(policy.normalisation.reward_norm.count) == 6
    np.testing.assert_allclose(float(policy.normalisation.reward_norm.var()), returns.var(), rtol=1e-9)
    second = policy.scale_rewards(torch.tensor([[30.0, -1.0]]), torch.tensor([[False, False]]))
    np.testing.assert_allclose(second.numpy(), np.clip([[30.0, -1.0]] / np.sqrt(returns.var() + 1e-8), -10, 10),
                               rtol=1e-5)
    assert float(second[0, 0]) == 10.0  # clipped at policy.reward_norm_clip
    policy.merge_statistics()  # env 0 went on from 3 (0.5 * 3 + 30), env 1 from 7
    assert float(policy.normalisation.reward_norm.count) == 8
    np.testing.assert_allclose(float(policy.normalisation.reward_norm.mean), np.mean(list(returns) + [31.5, 2.5]), rtol=1e-9)


def test_reward_statistics_are_checkpointed_and_a_mismatch_names_the_switch():
    policy = _ppo_reward_norm()
    policy.scale_rewards(torch.tensor([[1.0], [5.0]]), torch.zeros(2, 1, dtype=torch.bool))
    policy.merge_statistics()
    state = policy.learn_mode.state_dict()
    restored = _ppo_reward_norm()
    restored.learn_mode.load_state_dict(state)
    assert torch.equal(restored.normalisation.reward_norm.m2, policy.normalisation.reward_norm.m2) and float(restored.normalisation.reward_norm.count) == 2
    plain = PPOPolicy(EasyDict(deep_merge(PPOPolicy.default_config(), dict(model=dict(SMALL)))), OBS, BOX)
    with pytest.raises(ObsNormMismatchError, match=r"holds reward-scaling statistics.*policy.reward_norm=true"):
        plain.learn_mode.load_state_dict(state)
    with pytest.raises(ObsNormMismatchError, match=r"holds no reward-scaling statistics.*policy.reward_norm=false"):
        restored.learn_mode.load_state_dict(plain.learn_mode.state_dict())
    with pytest.raises(ValueError, match="policy.reward_norm_clip must be a finite number > 0"):
        _ppo_reward_norm(reward_norm_clip=0.0)


def test_observing_merging_and_normalising_read_nothing_back_from_the_device(monkeypatch):
    """Per step and per iteration on a GPU, a read of a device value on the host would wait for the device
    (tests/policies/test_host_sync.py): the statistics stay tensors throughout (counted here on CPU tensors)."""
    reads = []
    for name in ("item", "__bool__", "__float__", "__int__", "tolist", "numpy", "cpu"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    norm, rewards = RunningObsNorm((3,)), RunningObsNorm((), name="policy.reward_norm_clip")
    obs = torch.randn(8, 3)
    for _ in range(2):
        norm.observe(obs)
        rewards.observe(obs[:, 0])
        norm.merge()
        rewards.merge()
        norm(obs)
        rewards.scale(obs[:, 0])
    assert reads == []


# ---- PPO's value normalisation (policy.value_norm) ------------------------------------------------------
def _ppo_value_norm(**extra):
    cfg = EasyDict(deep_merge(PPOPolicy.default_config(), dict(value_norm=True, model=dict(SMALL), **extra)))
    torch.manual_seed(0)
    return PPOPolicy(cfg, OBS, BOX)


def test_the_critic_learns_normalised_targets_and_acts_in_the_env_s_units():
    policy = _ppo_value_norm(learn=dict(value_clip=True))
    obs = torch.randn(6, 3)
    raw = policy.model.value(obs)  # the critic's own output, in normalised units
    torch.testing.assert_close(policy.collect_mode.value(obs), raw)  # nothing merged yet: the identity
    returns = torch.tensor([90.0, 100.0, 110.0, 120.0])
    policy.observe_returns(returns)
    policy.merge_statistics()
    norm = policy.normalisation.value_norm
    assert float(norm.count) == 4 and float(norm.mean) == 105.0
    std = (float(returns.double().var(unbiased=False)) + 1e-8) ** 0.5
    torch.testing.assert_close(policy.collect_mode.value(obs), raw * std + 105.0)  # GAE bootstraps from this
    collected = policy.collect_mode.forward(obs)["value"]
    torch.testing.assert_close(collected, raw * std + 105.0)  # and stores this
    torch.testing.assert_close(policy.normalisation.norm_value(collected), raw)

    # the loss compares the critic's output with the targets in its units: a critic that already outputs the
    # normalised targets has no value loss left, in the env's units it would have had (120 - 105)**2 and more
    batch = make_batch(dict(obs=obs[:1], raw_action=torch.zeros(1, 1), adv=torch.zeros(1),
                            logp=policy.collect_mode.forward(obs[:1])["logp"], value=collected[:1],
                            returns=collected[:1]))
    policy.optimizer_step.optimizer.param_groups[0]["lr"] = 0.0  # only the loss is read
    out = policy.learn_mode.forward(batch)
    assert float(out["value_loss"]) < 1e-10


def test_value_statistics_are_checkpointed_and_a_mismatch_names_the_switch():
    policy = _ppo_value_norm()
    policy.observe_returns(torch.tensor([1.0, 5.0]))
    policy.merge_statistics()
    state = policy.learn_mode.state_dict()
    restored = _ppo_value_norm()
    restored.learn_mode.load_state_dict(state)
    assert float(restored.normalisation.value_norm.count) == 2 and float(restored.normalisation.value_norm.mean) == 3.0
    plain = PPOPolicy(EasyDict(deep_merge(PPOPolicy.default_config(), dict(model=dict(SMALL)))), OBS, BOX)
    with pytest.raises(ObsNormMismatchError, match=r"holds value-normalisation statistics.*policy.value_norm=true"):
        plain.learn_mode.load_state_dict(state)


def test_a_value_normalisation_of_targets_that_barely_vary_floors_their_variance():
    """Value targets all alike (variance 0) would divide the critic's errors by 1e-4; the floor keeps the std at
    0.1 (MAPPO's ValueNorm), and observation statistics keep no floor."""

    values = RunningObsNorm((), 1e6, var_floor=1e-2)
    values.observe(torch.full((64,), 3.0))
    values.merge()
    assert values(torch.tensor([3.1])).item() == pytest.approx(1.0, rel=1e-4)  # (3.1 - 3) / 0.1
    plain = RunningObsNorm((), 1e6)
    plain.observe(torch.full((64,), 3.0))
    plain.merge()
    assert plain(torch.tensor([3.1])).item() > 100


@pytest.mark.parametrize("obs_norm", [True, False])
@pytest.mark.parametrize("cls", [PPOPolicy, SACPolicy, TD3Policy])
def test_eval_mode_takes_an_env_s_float64_array_as_a_float32_tensor(cls, obs_norm):
    """Acting by hand on an env of one's own, whose observations are float64 arrays (numpy's default): as a tensor
    of them is taken, cast to float32 (it was a dtype error from the first layer without ``policy.obs_norm``)."""
    model = dict(SMALL) if "actor_head_hidden_size_list" in cls.default_config()["model"] else {}
    policy = cls(EasyDict(deep_merge(cls.default_config(), dict(obs_norm=obs_norm, model=model))), OBS, BOX)
    obs = _data(2)[2].numpy().astype(np.float64)
    expected = policy.eval_mode.forward(torch.from_numpy(obs).float())["action"]
    assert torch.equal(policy.eval_mode.forward(obs)["action"], expected)
