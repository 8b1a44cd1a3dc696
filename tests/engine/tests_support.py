"""Helpers shared by the DDP tests and their worker processes."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

from engine.config import deep_merge
from data.batch import make_batch
from policies import DQNPolicy


def dqn_policy_and_batches(seed: int):
    """A DQN policy (init from ``seed``) and two fixed batches of 16, one per rank."""
    torch.manual_seed(seed)
    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(learn=dict(td_loss="mse", learning_rate=0.01))))
    policy = DQNPolicy(cfg, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2))
    g = torch.Generator().manual_seed(123)
    batches = []
    for _ in range(2):
        n = 16
        batches.append(dict(obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g),
                            action=torch.randint(0, 2, (n,), generator=g), reward=torch.randn(n, generator=g),
                            terminated=torch.rand(n, generator=g) < 0.2, truncated=torch.zeros(n, dtype=torch.bool),
                            discount=torch.full((n,), 0.99), weight=torch.ones(n)))
    return policy, [make_batch(b) for b in batches]


def concat(batches):
    return make_batch({k: torch.cat([getattr(b, k) for b in batches]) for k in batches[0].keys()})
