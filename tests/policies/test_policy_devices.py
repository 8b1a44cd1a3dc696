"""Learner and actors on their own devices (on CPU: separate model objects), and the device check."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from data.batch import make_batch
from engine.config import deep_merge
from policies import DQNPolicy, PPOPolicy, SACPolicy
from policies.base import DeviceMismatchError

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)


def _dqn(**overrides):
    torch.manual_seed(0)
    return DQNPolicy(EasyDict(deep_merge(DQNPolicy.default_config(), overrides)), OBS, gym.spaces.Discrete(2))


def _batch(n=8):
    g = torch.Generator().manual_seed(1)
    return make_batch(dict(obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g),
                           action=torch.randint(0, 2, (n,), generator=g), reward=torch.randn(n, generator=g),
                           terminated=torch.zeros(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
                           discount=torch.full((n,), 0.99), weight=torch.ones(n)))


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_collect_on_its_own_device_acts_through_a_copy_refreshed_through_the_host():
    policy = _dqn(device=dict(collect="cpu"))
    assert policy.separate_actors and policy.collect_mode.device == torch.device("cpu")
    actor = policy.placement.actor("collect")
    assert actor is not policy.model and policy.placement.actor("eval") is policy.model
    assert _same(actor, policy.model)
    policy.learn_mode.forward(_batch())
    assert not _same(actor, policy.model)          # the copy lags until refreshed ...
    stale = policy.collect_mode.forward(torch.zeros(4, 3))["action"]
    policy.refresh_actors()
    assert _same(actor, policy.model)              # ... and equals the learner after each refresh
    assert policy.placement.actor("collect") is actor        # refreshed in place (host acting views stay valid)
    assert stale.shape == (4,)


@pytest.mark.parametrize("cls,action_space", [(PPOPolicy, gym.spaces.Discrete(2)),
                                              (SACPolicy, gym.spaces.Box(-2, 2, (1,), np.float32))])
def test_every_policy_acts_through_its_copy(cls, action_space):
    cfg = EasyDict(deep_merge(cls.default_config(), dict(device=dict(collect="cpu", eval="cpu"))))
    policy = cls(cfg, OBS, action_space)
    actor = policy.placement.actor("collect")
    assert actor is policy.placement.actor("eval") is not policy.model  # modes on one device share one copy
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(1.0)                              # now the copy differs from the learner
    obs = torch.zeros(2, 3)
    acted = policy.collect_mode.forward(obs)
    assert acted["action"].shape[0] == 2
    policy.refresh_actors()
    assert _same(actor, policy.model)


def test_refresh_stage_in_the_pipeline_keeps_the_copy_equal_to_the_learner(quick_cartpole_config):
    from pipelines import build_pipeline

    main, create = quick_cartpole_config
    main = copy.deepcopy(main)
    main.policy.device = dict(collect="cpu")
    pipeline = build_pipeline((main, create), max_env_step=256)
    assert pipeline.names[pipeline.names.index("learner") + 1] == "refresh"
    pipeline.run()
    policy = pipeline.policy
    assert pipeline.ctx.train_iter > 0 and policy.placement.actor("collect") is not policy.model
    assert _same(policy.placement.actor("collect"), policy.model)  # refreshed after the last update


def test_actor_refresher_waits_every_iterations_and_for_an_update():
    from engine import OnlineRLContext, Task
    from middleware import actor_refresher

    refreshed = []
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        task.use(lambda ctx: setattr(ctx, "train_iter", ctx.train_iter + (ctx.total_step not in (3, 4))))
        task.use(actor_refresher(lambda: refreshed.append(task.ctx.total_step), every=2))
        task.run(max_step=9)
    assert refreshed == [0, 2, 5, 7]  # 4: two iterations on, but no update since 2
    with pytest.raises(ValueError, match="refresh_every must be >= 1"):
        actor_refresher(lambda: None, every=0)


def test_unknown_device_string_names_the_key():
    with pytest.raises(ValueError, match=r"policy.device.collect='gpu1' is not a device torch knows"):
        _dqn(device=dict(collect="gpu1"))


def test_device_check_is_free_when_off():
    policy = _dqn()
    assert policy.learn_mode.forward == policy._forward_learn  # the bound method itself, no wrapper


def test_device_check_names_a_planted_tensor_in_the_batch():
    policy = _dqn(check_device=True)
    batch = _batch()
    batch.reward = torch.zeros(8, device="meta")
    with pytest.raises(DeviceMismatchError, match=r"learn_mode.forward_learn input 0.reward: tensor is on meta, "
                                                  r"expected cpu"):
        policy.learn_mode.forward(batch)


def test_device_check_names_a_planted_tensor_in_the_model():
    policy = _dqn(check_device=True, device=dict(collect="cpu"))
    policy.placement.actor("collect").register_buffer("stray", torch.zeros(1, device="meta"))
    with pytest.raises(DeviceMismatchError, match=r"collect_mode model tensor 'stray' is on meta, expected cpu"):
        policy.collect_mode.forward(torch.zeros(2, 3))
    assert policy.learn_mode.forward(_batch())["loss"].device.type == "cpu"  # the learner's model is clean
