"""Advantage actor-critic (A2C, ``create_config.policy.type='a2c'``): PPO's pieces with the unclipped policy
gradient and one pass over each collect as one minibatch (Mnih et al., 2016, synchronous).

It is ``policies.ppo.PPOPolicy`` with another loss and other defaults, not new code: dict observations, action
masks, observation and reward normalisation, DDP and compile all come with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from engine.params import section
from engine.registry import POLICY_REGISTRY

from .advantages import weighted_mean
from .ppo import PPOCollectParams, PPOLearnParams, PPOParams, PPOPolicy

__all__ = ["A2CPolicy", "A2CParams"]


@dataclass
class A2CParams(PPOParams):
    """A2C's ``policy`` section: PPO's, with one pass over each collect as one minibatch."""

    learn: PPOLearnParams = section(PPOLearnParams, epoch_per_collect=1, batch_size=80, learning_rate=7e-4,
                                    entropy_weight=0.01)
    """One epoch over each collect in one minibatch (``batch_size`` = ``collect.n_sample``), at 7e-4 and with an
    entropy bonus of 0.01; ``clip_ratio`` serves ``value_clip`` only."""
    collect: PPOCollectParams = section(PPOCollectParams, n_sample=80, gae_lambda=1.0)
    """Short rollouts (80 transitions per collect, over all collector envs), advantages from the rewards to each
    rollout's end (``gae_lambda=1``: A2C's n-step returns)."""


@POLICY_REGISTRY.register("a2c")
class A2CPolicy(PPOPolicy):
    """Advantage actor-critic (``type='a2c'``): the unclipped policy gradient, one pass per collect."""

    algo = "A2C"
    Params = A2CParams

    def _policy_loss(self, logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor,
                     shares: Optional[torch.Tensor] = None) -> tuple:
        return -weighted_mean(logp * adv, shares), {}
