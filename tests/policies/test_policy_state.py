"""Every policy's learn state (``Policy.state_dict`` / ``load_state_dict``): the checkpoint keys stay as
written by earlier versions, a load restores the models, the optimizer and the update count, and the config
in force wins over the checkpoint's optimizer settings, so a resume with a changed learning rate uses it."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from engine.config import deep_merge
from policies import A2CPolicy, DQNPolicy, PPOPolicy, RainbowPolicy, SACPolicy
from policies.bc import BCPolicy
from policies.cql import DiscreteCQLPolicy
from policies.td3 import DDPGPolicy, TD3Policy
from policies.td3bc import TD3BCPolicy

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-2, 2, (2,), np.float32)
SMALL_Q = dict(model=dict(encoder_hidden_size_list=[16]))
SMALL_AC = dict(model=dict(actor_head_hidden_size_list=[16], critic_head_hidden_size_list=[16]))

# policy, action space, small model, the keys a checkpoint holds, the config's settings per optimizer group
CASES = [
    (DQNPolicy, DISCRETE, SMALL_Q, {"model", "target_model"},
     lambda learn: [dict(lr=learn.learning_rate, weight_decay=learn.weight_decay)]),
    (RainbowPolicy, DISCRETE, SMALL_Q, {"model", "target_model"},
     lambda learn: [dict(lr=learn.learning_rate, weight_decay=learn.weight_decay)]),
    (DiscreteCQLPolicy, DISCRETE, SMALL_Q, {"model", "target_model"},
     lambda learn: [dict(lr=learn.learning_rate, weight_decay=learn.weight_decay)]),
    (BCPolicy, DISCRETE, dict(model=dict(hidden_size_list=[16])), {"model"},
     lambda learn: [dict(lr=learn.learning_rate, weight_decay=learn.weight_decay)]),
    (PPOPolicy, DISCRETE, SMALL_AC, {"model"}, lambda learn: [dict(lr=learn.learning_rate)]),
    (A2CPolicy, BOX, SMALL_AC, {"model"}, lambda learn: [dict(lr=learn.learning_rate)]),
    (SACPolicy, BOX, SMALL_AC, {"model", "target_critic"},
     lambda learn: [dict(lr=learn.learning_rate_q), dict(lr=learn.learning_rate_policy)]
     + ([dict(lr=learn.learning_rate_alpha)] if learn.auto_alpha else [])),
    (TD3BCPolicy, BOX, SMALL_AC, {"model", "target_model"},
     lambda learn: [dict(lr=learn.learning_rate_q), dict(lr=learn.learning_rate_policy)]),
    (TD3Policy, BOX, SMALL_AC, {"model", "target_model"},
     lambda learn: [dict(lr=learn.learning_rate_q), dict(lr=learn.learning_rate_policy)]),
    (DDPGPolicy, BOX, SMALL_AC, {"model", "target_model"},
     lambda learn: [dict(lr=learn.learning_rate_q), dict(lr=learn.learning_rate_policy)]),
]
#: state beyond modules, optimizer and update count: the TD3 family's smoothing-noise seed (policies/td3.py;
#: TD3+BC checkpoints written before it load without it, test_td3bc.py)
NOT_MODULES = {TD3Policy: {"noise_seed"}, DDPGPolicy: {"noise_seed"}, TD3BCPolicy: {"noise_seed"}}
IDS = [case[0].__name__ for case in CASES]


def _changed_rates(learn):
    """Every learning rate and weight decay of ``learn`` set to a value no default has."""
    return {key: 0.0123 * (i + 1) for i, key in enumerate(sorted(learn))
            if key.startswith("learning_rate") or key == "weight_decay"}


def _policy(cls, space, small, learn=None, seed=0):
    torch.manual_seed(seed)
    cfg = EasyDict(deep_merge(deep_merge(cls.default_config(), small), dict(learn=learn or {})))
    return cls(cfg, OBS, space)


@pytest.mark.parametrize("cls,space,small,modules,settings", CASES, ids=IDS)
def test_a_load_restores_the_learn_state_under_the_configs_optimizer_settings(cls, space, small, modules, settings):
    saved = _policy(cls, space, small, seed=0)
    saved.optimizer_step.updates = 7
    state = saved.state_dict()
    assert set(state) == modules | {"optimizer", "updates"} | NOT_MODULES.get(cls, set())  # as earlier versions

    changed = _changed_rates(cls.default_config()["learn"])
    assert changed, "the policy has no learning rate to change"
    resumed = _policy(cls, space, small, learn=changed, seed=1)  # other initial weights, other rates
    resumed.load_state_dict(state)

    assert resumed.optimizer_step.updates == 7
    for key in modules:
        ours, theirs = getattr(resumed, dict(resumed._checkpointed)[key]).state_dict(), state[key]
        assert all(torch.equal(ours[name], theirs[name]) for name in theirs), key
    wanted = settings(resumed.cfg.learn)
    assert len(resumed.optimizer_step.optimizer.param_groups) == len(wanted)
    for group, expected in zip(resumed.optimizer_step.optimizer.param_groups, wanted):
        assert {k: group[k] for k in expected} == expected  # the resumed config's, not the checkpoint's
    assert any(v in changed.values() for expected in wanted for v in expected.values())
