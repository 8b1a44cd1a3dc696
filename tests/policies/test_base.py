"""The base composes its pieces; an algorithm is one file that uses only the public members of the base."""
from __future__ import annotations

import doctest
import glob
import os
import re

import gymnasium as gym
import numpy as np
import pytest
import torch

import policies.advantages
import policies.lr_schedules
import policies.normalisation
import policies.placement
from policies.accel import HotPath, hot_path
from policies.base import Policy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the modules of the pieces the base composes, not algorithms
PIECES = {"__init__", "accel", "advantages", "base", "checks", "defaults", "distributional", "greedy", "models", "modes", "noisy",
          "normalisation", "obs_norm", "optim", "placement", "spaces"}
ALGORITHMS = sorted(path for path in glob.glob(os.path.join(ROOT, "policies", "*.py"))
                    if os.path.basename(path)[:-3] not in PIECES)
#: what an algorithm defines or declares itself, though the base names it
HOOKS = {"_forward_learn", "_forward_collect", "_forward_eval", "_checkpointed"}
#: the base's private members before the split (issue 30), which no algorithm may call again
FORMER = ("hot norm_obs actor check_finite optimize without_forward generator faster_than_hot_path init_model "
          "export_obs_norm optimizer_settings learn_model drop_hot_paths observing statistics obs_norm reward_norm "
          "own_copy actors acting model_factory updates optimizer noise check_device hot_paths hot_modes "
          "finite_check").split()


def _base_private() -> set:
    source = open(os.path.join(ROOT, "policies", "base.py"), encoding="utf-8").read()
    assigned = set(re.findall(r"self\.(_\w+)\s*[:=]", source))
    declared = {name for name in vars(Policy) if name.startswith("_") and not name.startswith("__")}
    return (assigned | declared | {"_" + name for name in FORMER}) - HOOKS


@pytest.mark.parametrize("path", ALGORITHMS, ids=[os.path.basename(p) for p in ALGORITHMS])
def test_an_algorithm_calls_no_private_member_of_the_base(path):
    used = set(re.findall(r"self\.(_\w+)\b", open(path, encoding="utf-8").read()))
    assert not used & _base_private(), f"{os.path.basename(path)} uses the base's {sorted(used & _base_private())}"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "policies", "*.py"))),
                         ids=lambda p: os.path.basename(p))
def test_no_policies_module_is_over_450_lines(path):
    with open(path, encoding="utf-8") as f:
        assert sum(1 for _ in f) <= 450


@pytest.mark.parametrize("module", [policies.placement, policies.normalisation, policies.lr_schedules,
                                    policies.advantages],
                         ids=lambda m: m.__name__)
def test_piece_examples_run(module):
    assert doctest.testmod(module).failed == 0


class Tiny(Policy):
    """One hot path per kind of declaration: one mode, and several."""

    def __init__(self, cfg):
        super().__init__(cfg, gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2))
        self.model = self.placement.build(lambda: torch.nn.Linear(2, 2))

    @hot_path("learn")
    def _loss(self, x):
        return self.learn_model(x).sum()

    @hot_path("collect", "eval", name="greedy")
    def _greedy(self, model, x):
        return model(x).argmax(1)


def test_a_declared_hot_path_is_built_once_per_mode_and_kept_under_its_name():
    policy = Tiny({})
    loss = policy._loss
    assert isinstance(loss, HotPath) and policy._loss is loss and policy.hot_paths[("learn", "loss")] is loss
    collect, evaluate = policy._greedy["collect"], policy._greedy["eval"]
    assert collect is not evaluate and policy._greedy["collect"] is collect
    assert set(policy.hot_paths) == {("learn", "loss"), ("collect", "greedy"), ("eval", "greedy")}
    assert collect(policy.placement.actor("collect"), torch.zeros(3, 2)).shape == (3,)


def test_a_new_learn_model_rebuilds_the_learn_hot_paths():
    policy = Tiny({})
    before = policy._loss
    policy.learn_mode.model = torch.nn.Sequential(policy.model)
    assert policy._loss is not before and policy.learn_mode.model is not policy.model
    policy.learn_mode.model = policy.model
    assert policy.learn_model is policy.model


@pytest.mark.parametrize("modes", [(), ("act",)])
def test_hot_path_refuses_an_unknown_mode(modes):
    with pytest.raises(ValueError, match="one or more of the modes"):
        hot_path(*modes)


@pytest.mark.parametrize("algo,action_space", [("dqn", gym.spaces.Discrete(2)), ("rainbow", gym.spaces.Discrete(2)),
                                               ("ppo", gym.spaces.Discrete(2)), ("sac", gym.spaces.Box(-1, 1, (2,))),
                                               ("td3", gym.spaces.Box(-1, 1, (2,)))])
def test_a_policy_called_by_hand_acts_on_an_envs_numpy_observation(algo, action_space):
    """``policy.eval_mode.forward(obs)`` on what a gymnasium vector env returns (a NumPy array), as a notebook or the
    GPU tests call it: the pipeline hands tensors, a user may not (the same TypeError hit every CUDA DQN test)."""
    from easydict import EasyDict

    from engine.config import deep_merge
    from engine.registry import POLICY_REGISTRY

    cls = POLICY_REGISTRY.get(algo)
    policy = cls(EasyDict(deep_merge(cls.default_config(), {})), gym.spaces.Box(-1, 1, (3,), np.float32), action_space)
    obs = np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype(np.float32)
    action = policy.eval_mode.forward(obs)["action"]
    assert isinstance(action, torch.Tensor) and len(action) == 4
