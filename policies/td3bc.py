"""TD3+BC (Fujimoto & Gu, 2021): TD3 on a fixed dataset, its actor pulled towards the dataset's actions by
a behaviour-cloning term.

The update is TD3's (``policies.td3``: target smoothing, the critics' step, then on the delayed actor steps the
actor's from the critics just stepped and the targets, the smoothing noise the same on any world size), with the
actor loss::

    lambda      = alpha / mean|Q1(s, pi(s))|                                                     (no gradient)
    actor_loss  = -lambda * mean(Q1(s, pi(s))) + mean((pi(s) - a)^2)       (critic parameters held fixed)

Observations are used as the dataset stores them. The paper normalises them by the dataset's mean and
standard deviation; here the policy is built from the env's spaces before any data is read, each DDP rank
holds another shard, and Pendulum's observations are of order 1 already (cos, sin and a velocity in
[-8, 8]; scaling the velocity to [-1, 1] did not learn faster in our runs). Only ``terminated`` cuts the
bootstrap: a transition the recording truncated bootstraps from its ``next_obs``, discounted by
``discount_factor`` (a dataset's transitions are one step each). Acting is ``pi(s)`` in env units.
Offline (``pipeline = "offline"``): it trains from ``dataset.name``, never from an env. Dict/Tuple observations
reach the actor and the critics as trees, each key encoded by their own encoders (``policy.model.encoders``,
as TD3's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

import gymnasium as gym
import torch
import torch.nn.functional as F

from engine.params import param, section
from engine.registry import POLICY_REGISTRY

from .base import SpaceMismatchError
from .defaults import OfflineEvalParams, PolicyParams
from .continuous_models import EncodedActorCriticModelParams
from .td3 import TD3Policy, TD3UpdateParams

__all__ = ["TD3BCPolicy", "TD3BCParams", "TD3BCLearnParams", "td3bc_actor_loss"]


def td3bc_actor_loss(q_pi: torch.Tensor, pi: torch.Tensor, action: torch.Tensor,
                     alpha: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """``-lambda * mean(Q(s, pi(s))) + mean((pi(s) - a)^2)`` with ``lambda = alpha / mean|Q(s, pi(s))|``
    (held fixed), and ``lambda``. Why the scale: it makes ``alpha`` independent of the reward's scale, so
    one value weighs Q against cloning on every task.

    Examples:
        >>> q, pi, a = torch.tensor([-4.0, -6.0]), torch.tensor([[0.5], [0.5]]), torch.tensor([[0.0], [1.0]])
        >>> loss, lmbda = td3bc_actor_loss(q, pi, a, alpha=2.5)
        >>> round(float(lmbda), 2), round(float(loss), 2)    # 2.5 / 5 = 0.5; -0.5 * -5 + 0.25
        (0.5, 2.75)
    """
    lmbda = alpha / q_pi.abs().mean().detach().clamp_min(1e-6)
    return -lmbda * q_pi.mean() + F.mse_loss(pi, action), lmbda


@dataclass
class TD3BCLearnParams(TD3UpdateParams):
    """TD3+BC's ``policy.learn``: TD3's update keys, the updates per iteration and the cloning weight."""

    update_per_iter: int = param(10)
    """Updates per loop iteration (the DDP ranks agree once per iteration)."""
    alpha: float = param(2.5)
    """The weight of Q against cloning: ``lambda = alpha / mean|Q(s, pi(s))|`` scales the Q term, so one value
    fits every reward scale (the paper's 2.5); 0: pure cloning. A negative value is refused when the policy is
    built."""


@dataclass
class TD3BCParams(PolicyParams):
    """TD3+BC's ``policy`` section (``TD3BCPolicy``): TD3's model and update, learning from a dataset (no
    collection, no replay buffer of its own, one-step transitions)."""

    discount_factor: float = param(0.99, rule="unit_interval")
    """gamma, the discount of future rewards: a dataset's transitions are one step each, so the TD target
    bootstraps with gamma itself."""
    model: EncodedActorCriticModelParams = section(EncodedActorCriticModelParams)
    """The actor and the two critics (``encoders``: a Dict/Tuple observation's keys)."""
    learn: TD3BCLearnParams = section(TD3BCLearnParams)
    """The update."""
    eval: OfflineEvalParams = section(OfflineEvalParams)
    """Evaluation (``OfflineEvalParams``)."""


@POLICY_REGISTRY.register("td3bc")
class TD3BCPolicy(TD3Policy):
    """TD3+BC for continuous actions (``create_config.policy.type='td3bc'``)."""

    pipeline = "offline"
    default_env_steps = None
    algo, label = "td3bc", "TD3+BC"
    #: Dict/Tuple observations are encoded key by key (``policy.model.encoders``), as TD3's
    structured_obs = True

    Params = TD3BCParams

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._alpha = float(self.params.learn.alpha)
        if not self._alpha >= 0:
            raise ValueError(f"policy.learn.alpha must be >= 0, got {self.params.learn.alpha}")

    def _check_action_space(self, action_space: gym.Space) -> None:
        if isinstance(action_space, gym.spaces.Discrete):  # before space_dims: its hint names online policies
            raise SpaceMismatchError(f"policy 'td3bc' needs a continuous (Box) action space, but the env's action "
                                     f"space is {action_space}: for a dataset of discrete actions use the offline "
                                     f"policy 'cql' or 'bc' (create_config.policy.type)")

    def _discount(self, batch: Any) -> float:
        """``discount_factor``: a dataset's transitions are one step each (no ``discount`` field)."""
        return self._gamma

    def _actor_loss(self, q_pi: torch.Tensor, pi: torch.Tensor,
                    action: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        loss, lmbda = td3bc_actor_loss(q_pi, pi, action, self._alpha)
        return loss, {"bc_loss": F.mse_loss(pi.detach(), action), "lambda": lmbda}
