"""TD3+BC's losses against an independent computation, its state, and the errors of a wrong action space or
config. Its delayed actor is TD3's update (tests/policies/test_td3.py)."""
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
from policies.td3bc import TD3BCPolicy

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _policy(**learn):
    torch.manual_seed(0)
    cfg = EasyDict(deep_merge(TD3BCPolicy.default_config(), dict(
        model=dict(actor_head_hidden_size_list=[32], critic_head_hidden_size_list=[32]), learn=learn)))
    return TD3BCPolicy(cfg, OBS, ACT)


def _batch(n=6, seed=3):
    g = torch.Generator().manual_seed(seed)
    return make_batch(dict(obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g),
                           action=torch.rand(n, 1, generator=g) * 4 - 2, reward=torch.randn(n, generator=g),
                           terminated=torch.tensor([False, True, False, False, True, False]),
                           truncated=torch.tensor([False, False, True, False, False, False])))


def _state(module):
    return {k: v.clone() for k, v in module.state_dict().items()}


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def test_td3bc_losses_match_independent_computation():
    policy = _policy(alpha=2.5, policy_noise=0.2, noise_clip=0.5)
    model, target = copy.deepcopy(policy.model), copy.deepcopy(policy._target_model)
    batch = _batch()
    policy.learn_mode.forward(batch)  # update 1: a critic step; update 2 below is an actor step
    model.critic.load_state_dict(policy.model.critic.state_dict())
    drawn = []  # the update's smoothing noise (its draw is tested in tests/policies/test_td3.py)
    draw = policy._smoothing_noise
    policy._smoothing_noise = lambda *shape: drawn.append(draw(*shape)) or drawn[-1]
    out = policy.learn_mode.forward(batch)
    noise = drawn[0]
    assert noise.shape == (6, 1) and 0 < noise.abs().max() <= 0.5
    with torch.no_grad():
        a = batch.action / 2.0  # env units -> (-1, 1)
        a_next = (target.actor(batch.next_obs) + noise).clamp(-1, 1)
        not_term = 1.0 - batch.terminated.float()  # the truncated row still bootstraps
        y = batch.reward + 0.99 * not_term * torch.min(*target.critic(batch.next_obs, a_next))
        q1, q2 = model.critic(batch.obs, a)
        q_loss = F.mse_loss(q1, y) + F.mse_loss(q2, y)
        pi = model.actor(batch.obs)
        q_pi = model.critic(batch.obs, pi)[0]
        lmbda = 2.5 / q_pi.abs().mean()
        actor_loss = -lmbda * q_pi.mean() + ((pi - a) ** 2).mean()
    assert out["target_q"].item() == pytest.approx(y.mean().item(), rel=1e-5)
    assert out["q_loss"].item() == pytest.approx(q_loss.item(), rel=1e-5)
    assert out["actor_loss"].item() == pytest.approx(actor_loss.item(), rel=1e-5, abs=1e-6)
    assert out["loss"].item() == pytest.approx((q_loss + actor_loss).item(), rel=1e-5)


def test_td3bc_actor_loss_does_not_move_the_critic():
    policy = _policy(actor_update_freq=1)
    policy.optimizer_step.optimizer.param_groups[0]["lr"] = 0.0  # the critic's: only the actor's loss could move it
    critic = _state(policy.model.critic)
    actor = _state(policy.model.actor)
    policy.learn_mode.forward(_batch())
    assert _same(critic, policy.model.critic.state_dict())
    assert not _same(actor, policy.model.actor.state_dict())


def test_td3bc_state_dict_round_trip_continues_identically():
    policy = _policy()
    for seed in range(3):  # odd: the next update is an actor step
        policy.learn_mode.forward(_batch(seed=seed))
    copy_ = _policy()
    copy_.learn_mode.load_state_dict(copy.deepcopy(policy.learn_mode.state_dict()))
    obs = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32))
    np.testing.assert_array_equal(policy.eval_mode.forward(obs)["action"], copy_.eval_mode.forward(obs)["action"])
    for p in (policy, copy_):
        torch.manual_seed(7)
        p.learn_mode.forward(_batch(seed=9))
    for key, value in policy.learn_mode.state_dict()["model"].items():
        assert torch.equal(value, copy_.learn_mode.state_dict()["model"][key]), key
    assert copy_.learn_mode.state_dict()["updates"] == 4


def test_td3bc_checkpoint_of_an_earlier_version_without_the_noise_seed_loads():
    """Checkpoints written before TD3+BC shared TD3's update hold no ``noise_seed``: the policy keeps its own."""
    saved = _policy()
    saved.learn_mode.forward(_batch())
    state = copy.deepcopy(saved.learn_mode.state_dict())
    del state["noise_seed"]
    resumed = _policy()
    own_seed = resumed._noise_seed
    resumed.learn_mode.load_state_dict(state)
    assert resumed._noise_seed == own_seed and resumed.optimizer_step.updates == 1
    assert all(torch.equal(v, saved.model.state_dict()[k]) for k, v in resumed.model.state_dict().items())


def test_td3bc_actions_in_env_units_within_bounds():
    policy = _policy()
    obs = torch.zeros(50, 3)
    greedy = policy.eval_mode.forward(obs)["action"].numpy()
    noisy = policy.collect_mode.forward(obs, noise=0.5)["action"].numpy()
    assert greedy.shape == noisy.shape == (50, 1) and np.all(np.abs(noisy) <= 2.0)
    np.testing.assert_allclose(policy.collect_mode.forward(obs)["action"], greedy)
    assert noisy.std() > 0.1


def test_td3bc_rejects_discrete_actions_naming_the_offline_alternatives():
    with pytest.raises(SpaceMismatchError, match=r"'td3bc' needs a continuous \(Box\).*Discrete\(2\).*'cql' or 'bc'"):
        TD3BCPolicy(EasyDict(TD3BCPolicy.default_config()), OBS, gym.spaces.Discrete(2))


@pytest.mark.parametrize("key,value,match", [
    ("actor_update_freq", 0, r"'policy.learn.actor_update_freq' is 0: it must be at least 1"),
    ("policy_noise", -0.1, r"'policy.learn.policy_noise' is -0.1: it must be >= 0"),
])
def test_td3bc_value_out_of_its_rule_is_refused_at_compile_time(key, value, match):
    """The rules ``TD3BCParams`` declares, checked by ``check_config`` before any dataset is read."""
    cfg = deep_merge(TD3BCPolicy.default_config(), dict(learn={key: value}))
    with pytest.raises(ConfigError, match=match):
        TD3BCPolicy.check_config({"policy": cfg})


@pytest.mark.parametrize("key,value,match", [
    ("target_theta", 0.0, r"target_theta must lie in \(0, 1\]"),
    ("alpha", -1.0, r"alpha must be >= 0"),
])
def test_td3bc_bad_config_value_names_the_key(key, value, match):
    """Values no rule refuses, refused when the policy is built."""
    with pytest.raises(ValueError, match=match):
        _policy(**{key: value})


def test_td3bc_on_a_discrete_dataset_and_env_fails_before_training(tmp_path):
    """The offline pipeline on CartPole and its (discrete) dataset: the error names the env, the action space
    and the offline policies that fit, and nothing is trained."""
    pytest.importorskip("minari")
    from dizoo.classic_control.pendulum.config.pendulum_td3bc_config import create_config, main_config
    from pipelines import build_pipeline

    main, create = copy.deepcopy(main_config), copy.deepcopy(create_config)
    main.dataset.name = "cartpole/medium-v0"  # a tiny random one of the session's dataset root (conftest)
    main.log = dict(progress=False)
    create.env.type = "cartpole"
    with pytest.raises(SpaceMismatchError, match=r"env 'CartPole-v1'.*'td3bc' needs a continuous.*'cql' or 'bc'"):
        build_pipeline((main, create), exp_name=str(tmp_path / "run"))


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_td3bc_under_ddp_keeps_ranks_identical(tmp_path, monkeypatch):
    """2 gloo ranks on disjoint shards, 40 updates (20 actor steps): the critics' backward every update and the
    actor's on the same updates on every rank, so the models stay identical."""
    pytest.importorskip("minari")
    import json
    import os

    from data.offline import Episode, write_dataset
    from engine import launch

    # the offline DDP worker of tests/engine (spawned ranks import it by name, from the path passed to them)
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engine"))
    import offline_ddp_workers

    rng = np.random.default_rng(0)
    env = gym.make("Pendulum-v1")
    episodes = [Episode(rng.uniform(-1, 1, (21, 3)).astype(np.float32), rng.uniform(-2, 2, (20, 1)).astype(np.float32),
                        -rng.uniform(0, 16, 20).astype(np.float32), np.zeros(20, bool), np.r_[np.zeros(19, bool), True])
                for _ in range(5)]
    root = str(tmp_path / "datasets")
    write_dataset("test/pendulum-v0", episodes, env.observation_space, env.action_space, root=root)
    launch(offline_ddp_workers.offline_run, nprocs=2, timeout=60, args=(
        str(tmp_path), root, "test/pendulum-v0", "dizoo.classic_control.pendulum.config.pendulum_td3bc_config"))
    runs = [json.loads((tmp_path / f"offline_rank{r}.json").read_text()) for r in range(2)]
    assert runs[0]["shard"] == [0, 2, 4] and runs[1]["shard"] == [1, 3]
    assert runs[0]["summary"]["train_iter"] == runs[1]["summary"]["train_iter"] == 40
    assert any(key.startswith("actor.") for key in runs[0]["params"])
    for key, value in runs[0]["params"].items():
        np.testing.assert_allclose(value, runs[1]["params"][key], rtol=0, atol=1e-6, err_msg=key)
