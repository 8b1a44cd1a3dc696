"""Discrete conservative Q-learning (Kumar et al., 2020, CQL(H)): DQN on a fixed dataset, with a penalty
that pushes down the Q values of actions the dataset did not take.

One update, on one screen (``_loss``)::

    q_all    = Q(obs);  q = q_all[action]
    a*       = argmax_a Q(next_obs)   (over the legal actions, with a mask)  (double Q: the online net picks ...)
    target   = reward + gamma * (1 - terminated) * Q_target(next_obs)[a*]   (... the target net rates)
    td_loss  = mean(huber(q - target))           (or mse)
    cql_loss = mean(logsumexp_a q_all - q)       (soft maximum over the (legal) actions minus the dataset's action)
    loss     = td_loss + cql_alpha * cql_loss

Only ``terminated`` cuts the bootstrap: a transition the recording truncated bootstraps from its
``next_obs``. Acting is greedy in Q (``eps``-greedy in the collect mode). Offline (``pipeline =
"offline"``): it trains from ``dataset.name``, never from an env.

Dict/Tuple observations reach the Q network as trees, each key encoded by its own encoder
(``policy.model.encoders``, as DQN's). Where they carry a legal-action mask (``action_mask``,
``policies.masks``), acting (``QValuePolicy``'s, as DQN's) and the next action of the target take legal actions
only, and the penalty's soft maximum runs over the legal actions: an illegal action is never taken, so there is
no value of it to keep down.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

import gymnasium as gym
import torch
import torch.nn.functional as F

from engine.params import param, section
from engine.registry import POLICY_REGISTRY

from data.obs import cat

from .accel import hot_path
from .base import OfflineEvalParams, PolicyParams, resolve_shape, space_dims
from .dqn import EpsilonDraws, QLearnParams, QModelParams, QValuePolicy
from .masks import action_mask, masked_argmax, masked_logits, observation_has_mask
from .models import QNetwork
from .normalisation import model_obs
from .optim import OptimizerStep
from .placement import DeviceGenerators
from .spaces import model_observation

__all__ = ["DiscreteCQLPolicy", "CQLParams", "cql_penalty"]


def cql_penalty(q_all: torch.Tensor, q_taken: torch.Tensor) -> torch.Tensor:
    """``mean(logsumexp_a Q(s, a) - Q(s, a_data))``: zero only when the dataset's action dominates.

    Examples:
        >>> q = torch.tensor([[0.0, 0.0]])
        >>> round(float(cql_penalty(q, q[:, 0])), 4)    # log 2: both actions alike
        0.6931
    """
    return (torch.logsumexp(q_all, dim=1) - q_taken).mean()


@dataclass
class CQLLearnParams(QLearnParams):
    """``policy.learn`` of CQL: DQN's update on a dataset, with the conservative penalty."""

    update_per_iter: int = param(10, rule="at_least_one")
    """Updates per loop iteration (the ranks agree once per iteration)."""
    cql_alpha: float = param(1.0, rule="not_negative")
    """The conservative penalty's weight (0: plain offline DQN)."""


@dataclass
class CQLParams(PolicyParams):
    """CQL's ``policy`` section."""

    discount_factor: float = param(0.99, rule="unit_interval")
    """gamma, the discount of future rewards."""
    model: QModelParams = section(QModelParams, encoder_hidden_size_list=[128, 128])
    """The Q network (DQN's, without the Rainbow pieces; ``encoders``: a Dict/Tuple observation's keys)."""
    learn: CQLLearnParams = section(CQLLearnParams, batch_size=256, learning_rate=5e-4, target_update_freq=200)
    """The update."""
    eval: OfflineEvalParams = section(OfflineEvalParams)
    """Evaluation (``OfflineEvalParams``)."""


@POLICY_REGISTRY.register("cql")
class DiscreteCQLPolicy(QValuePolicy):
    """Conservative Q-learning for discrete actions (``create_config.policy.type='cql'``): DQN's network,
    acting, target update and learn state (``policies.dqn.QValuePolicy``), its own update."""

    pipeline = "offline"
    default_env_steps = None
    Params = CQLParams
    params: CQLParams

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        obs_shape, _, _ = space_dims(observation_space, action_space, "cql", continuous=False, structured=True)
        learn = self.params.learn
        obs_in = model_observation(cfg["model"], observation_space, obs_shape, "cql")  # a shape, or the Dict space
        observation_has_mask(observation_space, action_space, "cql")  # a mask that cannot be used: named here
        action_dim = int(resolve_shape(cfg["model"], "action_shape", int(action_space.n), "cql",
                                       f"action space {action_space}"))
        model = self.params.model
        self.model = self.placement.build(lambda: QNetwork(obs_in, action_dim, model.encoder_hidden_size_list,
                                                           model.dueling, encoders=model.encoders))
        self._target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.optimizer_step = OptimizerStep.adam([self.model.parameters()], self.optimizer_settings(), "CQL")
        self._td_loss = F.smooth_l1_loss if learn.td_loss == "huber" else F.mse_loss
        self._gamma = float(self.params.discount_factor)
        self._alpha = float(learn.cql_alpha)
        self._double_q = learn.double_q
        self._target_update_freq = learn.target_update_freq
        self._target_theta = float(learn.target_theta)
        self._grad_clip = float(learn.grad_clip_norm)
        self._action_dim = action_dim
        self._eps_draws = EpsilonDraws(DeviceGenerators(), action_dim)

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        dev = self.device
        # float tensors, or a tree's leaves in their dtypes (its encoders cast them: an image stays uint8)
        obs, next_obs = (model_obs(o, dev, self.normalisation) for o in (batch.obs, batch.next_obs))
        action = batch.action.to(dev).long()
        reward = batch.reward.to(dev).float()
        not_done = (~batch.terminated.to(dev)).float()

        loss, stats = self._loss(obs, next_obs, action, reward, not_done)
        self._step(loss)
        return {"loss": loss.detach(), **stats}

    @hot_path("learn")
    def _loss(self, obs: Any, next_obs: Any, action: torch.Tensor, reward: torch.Tensor,
              not_done: torch.Tensor) -> tuple:
        """The learner's hot path (compiled with ``policy.compile``): ``(loss, detached statistics)``. Where the
        observations carry a legal-action mask, the next action is the best legal one and the penalty's soft
        maximum runs over the legal actions."""
        n = action.shape[0]
        # one forward of the online net over obs and next_obs: one DDP forward per update
        q_both = self.learn_model(cat([obs, next_obs]))
        q_all, q_next_online = q_both[:n], q_both[n:].detach()
        q = q_all.gather(1, action.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            q_next_target = self._target_model(next_obs)
            # double Q: the online net picks the next action, the target net rates it
            pick = q_next_online if self._double_q else q_next_target
            next_action = masked_argmax(pick, action_mask(next_obs))
            next_value = q_next_target.gather(1, next_action.unsqueeze(1)).squeeze(1)
            target = reward + self._gamma * not_done * next_value
        td_loss = self._td_loss(q, target)
        cql_loss = cql_penalty(masked_logits(q_all, action_mask(obs)), q)
        loss = td_loss + self._alpha * cql_loss
        return loss, {"td_loss": td_loss.detach(), "cql_loss": cql_loss.detach(), "q_value": q.detach().mean(),
                      "target_q": target.mean()}
