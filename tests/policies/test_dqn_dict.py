"""DQN and Rainbow on dictionary observations and legal-action masks (issue 31): a Dict observation is encoded key
by key; acting (greedy and epsilon-greedy) never takes an illegal action over a whole collection; the target's
max is over the legal next actions."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from data.envs import ENV_REGISTRY, make_vector_env
from data.env_loop import EnvLoop
from data.obs import is_tree, to_tensor
from data.replay import ReplayBuffer
from engine.config_merge import deep_merge
from middleware import StepCollector
from engine import OnlineRLContext
from policies.dqn import DQNPolicy
from policies.masks import action_mask
from policies.rainbow import RainbowPolicy

GYM = ENV_REGISTRY.get("gym")


def _taxi(num_envs=4):
    return make_vector_env(GYM, dict(GYM.default_config(), env_id="Taxi-v4", max_episode_steps=50), num_envs, seed=0)


def _policy(cls, env, **overrides):
    cfg = EasyDict(deep_merge(cls.default_config(), overrides))
    return cls(cfg, env.single_observation_space, env.single_action_space)


@pytest.mark.parametrize("cls", [DQNPolicy, RainbowPolicy])
def test_masked_acting_never_takes_an_illegal_action(cls):
    env = _taxi()
    policy = _policy(cls, env)
    loop = EnvLoop(policy.collect_mode, env, seed=0)
    illegal = taken = 0
    for eps in (1.0, 0.5, 0.0):
        for step in loop.run(60, {"eps": eps} if cls is DQNPolicy else {}):
            mask, action = action_mask(step.obs), step.out["action"]
            illegal += int((~mask[torch.arange(len(action)), action]).sum())
            taken += len(action)
    evaluation = EnvLoop(policy.eval_mode, _taxi(2), seed=1)
    for step in evaluation.run(30):
        illegal += int((~action_mask(step.obs)[torch.arange(2), step.out["action"]]).sum())
    assert taken == 720 and illegal == 0



@pytest.mark.parametrize("cls", [DQNPolicy, RainbowPolicy])
def test_eval_mode_takes_the_env_s_dict_of_arrays(cls):
    """Acting by hand (docs/after_training.md): the vector env's own dict observation, as the env loop's tree."""
    env = _taxi()
    policy = _policy(cls, env)
    obs, _ = env.reset(seed=0)
    action = policy.eval_mode.forward(obs)["action"]
    assert torch.equal(action, policy.eval_mode.forward(to_tensor(obs))["action"])
    assert torch.equal(action, policy.eval_mode.forward({k: torch.as_tensor(v) for k, v in obs.items()})["action"])

def test_unmasked_random_acting_does_take_illegal_actions():
    """The check above can fail: without the mask, random Taxi actions are often illegal."""
    env = _taxi()
    masks, actions = [], []
    obs, _ = env.reset(seed=0)
    for _ in range(50):
        action = env.action_space.sample()
        masks.append(obs["action_mask"])
        actions.append(action)
        obs, *_ = env.step(action)
    illegal = sum(int((m[np.arange(4), a] == 0).sum()) for m, a in zip(masks, actions))
    assert illegal > 20


def test_dqn_learns_from_a_replay_of_dict_observations_and_targets_legal_next_actions():
    env = _taxi()
    policy = _policy(DQNPolicy, env, learn=dict(batch_size=32))
    buffer = ReplayBuffer(1000)
    collect = StepCollector(policy.collect_mode, env, n_sample=64)
    ctx = OnlineRLContext()
    ctx.collect_kwargs = {"eps": 1.0}
    for _ in range(4):
        collect(ctx)
        buffer.push(ctx.trajectories)
    batch = buffer.sample(32)
    assert is_tree(batch.obs) and batch.obs.action_mask.dtype == torch.int8
    before = [p.detach().clone() for p in policy.model.parameters()]
    out = policy.learn_mode.forward(batch)
    assert torch.isfinite(out["loss"])
    assert all(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))


@pytest.mark.parametrize("double_q", [True, False])
def test_the_target_takes_the_best_legal_next_action(double_q):
    """Next states where only action 0 is legal and action 5 looks best by far: the target bootstraps from
    action 0's value."""
    from data.batch import make_batch, ttorch

    env = _taxi()
    policy = _policy(DQNPolicy, env, learn=dict(double_q=double_q, learning_rate=1e-12), model=dict(dueling=False))
    with torch.no_grad():
        for net in (policy.model, policy._target_model):
            net.head.bias.copy_(torch.tensor([0.0, 0, 0, 0, 0, 1000.0]))
    only_first = torch.zeros(4, 6, dtype=torch.int8)
    only_first[:, 0] = 1
    state = ttorch.Tensor({"observation": torch.arange(4), "action_mask": torch.ones(4, 6, dtype=torch.int8)})
    next_state = ttorch.Tensor({"observation": torch.arange(4) + 10, "action_mask": only_first})
    batch = make_batch({"obs": state, "next_obs": next_state, "action": torch.zeros(4, dtype=torch.long),
                        "reward": torch.zeros(4), "discount": torch.full((4,), 0.5),
                        "terminated": torch.zeros(4, dtype=torch.bool), "truncated": torch.zeros(4, dtype=torch.bool)})
    with torch.no_grad():
        q_first = policy._target_model(next_state)[:, 0]
    out = policy.learn_mode.forward(batch)
    assert torch.allclose(out["target_q"], 0.5 * q_first.mean(), atol=1e-4)
    assert out["target_q"] < 100  # action 5's 1000 was not taken


def test_dqn_on_a_dict_observation_without_mask():
    space = gym.spaces.Dict({"vec": gym.spaces.Box(-1, 1, (3,), np.float32), "dir": gym.spaces.Discrete(4),
                             "image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)})
    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(model=dict(encoders={"vec": {"hidden_sizes": [16]}}))))
    policy = DQNPolicy(cfg, space, gym.spaces.Discrete(3))
    from data.batch import ttorch
    obs = ttorch.Tensor({"vec": torch.zeros(5, 3), "dir": torch.arange(5) % 4,
                         "image": torch.zeros(5, 7, 7, 3, dtype=torch.uint8)})
    assert policy.eval_mode.forward(obs)["action"].shape == (5,)
    assert policy.collect_mode.forward(obs, eps=0.5)["action"].shape == (5,)
    with pytest.raises(ValueError, match="needs a flat Box observation space or \\[C, H, W\\] images or a Dict"):
        DQNPolicy(EasyDict(DQNPolicy.default_config()), gym.spaces.Discrete(3), gym.spaces.Discrete(3))
