"""Soft Actor-Critic (Haarnoja et al., 2018): twin Q, target critics with soft update, a tanh-squashed
Gaussian actor, automatic entropy tuning.

One update, on one screen (``_loss``; ``_forward_learn`` drives it: batch in, backward, step, target)::

    a', logp'  ~ pi(.|s')                                         (no gradient)
    target     = r + discount * (1 - terminated) * (min_i Qtarg_i(s', a') - alpha * logp')
    q_loss     = mean((Q1(s, a) - target)^2) + mean((Q2(s, a) - target)^2)
    a~, logp~  ~ pi(.|s)                                          (reparameterized)
    pi_loss    = mean(alpha * logp~ - min_i Q_i(s, a~))           (critic parameters held fixed)
    alpha_loss = -mean(log_alpha * (logp~ + target_entropy))      (auto_alpha)

All three losses are summed and take ONE backward pass and ONE optimizer step (one parameter group per
learning rate). The actor's Q values use the critic with its parameters detached, so pi_loss moves only the
actor. One forward and one backward per update is what DDP expects, so the whole model can be wrapped.
Actions are stored in env units and mapped to (-1, 1) for the networks.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from data.obs import Obs, num_rows
from data.replay import PrioritizedReplayParams
from engine.params import Params, param, section
from engine.registry import POLICY_REGISTRY

from .accel import hot_path
from .base import Policy
from .defaults import CollectParams, OffPolicyParams, OnlineEvalParams
from .greedy import GreedyActor, TanhMean
from .continuous_models import EncodedActorCriticModelParams, ObsInput, SquashedGaussianActor, TwinQ, model_input
from .optim import OptimizerStep
from .placement import DeviceGenerators, PerDevice
from .normalisation import model_obs

__all__ = ["SACPolicy", "SACModel", "sac_target", "SACParams", "SACLearnParams", "SACOtherParams"]


def sac_target(reward: torch.Tensor, discount: torch.Tensor, terminated: torch.Tensor, q1_next: torch.Tensor,
               q2_next: torch.Tensor, logp_next: torch.Tensor, alpha: float | torch.Tensor) -> torch.Tensor:
    """The soft TD target; ``discount`` already holds gamma^n (n-step) and truncation does not cut it."""
    soft_value = torch.min(q1_next, q2_next) - alpha * logp_next
    return reward + discount * (~terminated.bool()).float() * soft_value


class SACModel(nn.Module):
    """Actor, twin critic and the log of the entropy temperature, used through one ``forward``. ``obs``: a flat
    observation's size, or a Dict/Tuple observation space, for which the actor and the critic each have their
    own encoder (``policies.continuous_models.TwinQ`` says why), configured by ``encoders`` (``policy.model.encoders``)."""

    def __init__(self, obs: ObsInput, action_dim: int, actor_hidden: Any, critic_hidden: Any, init_alpha: float,
                 auto_alpha: bool, encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.actor = SquashedGaussianActor(obs, action_dim, actor_hidden, encoders)
        self.critic = TwinQ(obs, action_dim, critic_hidden, encoders)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)), requires_grad=auto_alpha)

    def sample(self, obs: Any) -> tuple:
        """A reparameterized squashed sample in (-1, 1) and its log-probability."""
        mean, log_std = self.actor(obs)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        action = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # log |d tanh(u) / du| = log(1 - tanh(u)^2), in a numerically stable form
        logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return action, logp

    def forward(self, obs: Any, action: torch.Tensor, next_obs: Any):
        """The critics' Q of the batch's actions, the actor's reparameterized sample of ``obs`` rated by the
        critics with their parameters detached, and the actor's sample of ``next_obs`` (no gradient). The
        critic encodes ``obs`` once; the sample is rated on those features detached, which is exact (they do
        not depend on the actor)."""
        with torch.no_grad():
            next_action, next_logp = self.sample(next_obs)
        features = self.critic.encode(obs)
        q1, q2 = self.critic(features, action, encoded=True)
        new_action, new_logp = self.sample(obs)
        frozen = {name: p.detach() for name, p in self.critic.named_parameters()}
        q1_new, q2_new = functional_call(self.critic, frozen, (features.detach(), new_action), {"encoded": True})
        return q1, q2, new_logp, torch.min(q1_new, q2_new), next_action, next_logp


@dataclass
class SACLearnParams(Params):
    """SAC's ``policy.learn``: the update (module docstring) and its entropy temperature."""

    update_per_collect: int = param(1, rule="at_least_one")
    """Updates after each collect of ``collect.n_sample`` transitions (both 1: one update per env step)."""
    batch_size: int = param(256, rule="at_least_one")
    """Transitions per update."""
    learning_rate_q: float = param(1e-3, rule="positive")
    """Adam's learning rate of the critics."""
    learning_rate_policy: float = param(1e-3, rule="positive")
    """Adam's learning rate of the actor."""
    learning_rate_alpha: float = param(3e-4, rule="positive")
    """Adam's learning rate of the temperature's log (with ``auto_alpha``)."""
    target_theta: float = param(0.005, rule="unit_interval")
    """Polyak rate of the target critics, after every update: ``target += theta * (online - target)``;
    1: they copy the online critics."""
    alpha: float = param(0.2, rule="positive")
    """The entropy temperature to start from (fixed without ``auto_alpha``): the weight of the entropy bonus
    against Q. Kept as its log, so it must be > 0."""
    auto_alpha: bool = param(True)
    """Tune the temperature so that the policy's entropy tracks ``target_entropy`` (``alpha_loss``); False:
    ``alpha`` stays fixed."""
    target_entropy: Optional[float] = param(None)
    """The entropy ``auto_alpha`` aims at; None: ``-action_dim`` (the paper's heuristic)."""


@dataclass
class SACOtherParams(Params):
    """SAC's ``policy.other``."""

    replay_buffer: PrioritizedReplayParams = section(PrioritizedReplayParams, replay_buffer_size=1_000_000)
    """The replay buffer, sampled uniformly or, with ``priority``, by priority
    (``data.replay.PrioritizedReplayParams``)."""


@dataclass
class SACParams(OffPolicyParams):
    """SAC's ``policy`` section (``SACPolicy``; the update is in the module docstring)."""

    priority: bool = param(False)
    """Prioritized replay: sample transitions in proportion to their TD error (the mean over both critics,
    written back after each update), shaped by ``other.replay_buffer.alpha``."""
    priority_IS_weight: bool = param(False)
    """With ``priority``: weight each transition's critic loss by its importance-sampling weight
    (``other.replay_buffer.beta``), against the bias of prioritized sampling."""
    model: EncodedActorCriticModelParams = section(EncodedActorCriticModelParams)
    """The actor (a squashed Gaussian) and the two critics, with the encoders of a Dict observation."""
    learn: SACLearnParams = section(SACLearnParams)
    """The update: batch, learning rates, targets, entropy temperature."""
    collect: CollectParams = section(CollectParams, n_sample=1)
    """Collection."""
    eval: OnlineEvalParams = section(OnlineEvalParams, evaluator=dict(eval_freq=1000))
    """Evaluation, every 1000 learner updates by default."""
    other: SACOtherParams = section(SACOtherParams)
    """The replay buffer."""


@POLICY_REGISTRY.register("sac")
class SACPolicy(Policy):
    """Soft Actor-Critic for continuous actions (``create_config.policy.type='sac'``)."""

    pipeline = "off_policy"
    action_spaces = ("continuous",)
    supports_obs_norm = True
    Params = SACParams

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        obs_in, action_dim = model_input(cfg, observation_space, action_space, "sac")
        model, learn = self.params.model, self.params.learn
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ValueError(f"policy 'sac' needs a bounded action space, got {action_space}")
        self.model = self.placement.build(lambda: SACModel(
            obs_in, action_dim, model.actor_head_hidden_size_list, model.critic_head_hidden_size_list,
            float(learn.alpha), bool(learn.auto_alpha), model.encoders))
        self._target_critic = copy.deepcopy(self.model.critic).requires_grad_(False)
        # one group per setting: the temperature's only with auto_alpha (zip stops at the settings)
        params = [self.model.critic.parameters(), self.model.actor.parameters(), [self.model.log_alpha]]
        self.optimizer_step = OptimizerStep.adam(params, self.optimizer_settings(), "SAC")
        self._auto_alpha = bool(learn.auto_alpha)
        self._target_entropy = float(learn.target_entropy if learn.target_entropy is not None else -action_dim)
        self._theta = float(learn.target_theta)
        self._use_weight = bool(self.params.priority and self.params.priority_IS_weight)
        self._scale = torch.as_tensor((action_space.high - action_space.low) / 2.0, dtype=torch.float32)
        self._bias = torch.as_tensor((action_space.high + action_space.low) / 2.0, dtype=torch.float32)
        self._action_dim = action_dim
        self._generators = DeviceGenerators()  # the random warm-up's draws, on the collect device
        self._affine = PerDevice.copies(self._scale, self._bias)

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        loss, stats = self._batch_loss(batch)
        self.optimizer_step.step(loss)
        self._update_target()
        return self._learn_stats(loss, stats)

    def _graph_update(self, batch: Any, count: torch.Tensor, number: int) -> tuple:
        """``_forward_learn`` with nothing read on the host (``policies.update_graph``: ``policy.compile=
        'cudagraph_update'``): ``(statistics, priority, non-finite flag)``."""
        loss, stats = self._batch_loss(batch)
        bad = self.optimizer_step.graph_step(loss)
        self._update_target()
        out = self._learn_stats(loss, stats)
        return out, out.pop("priority"), bad

    def _update_target(self) -> None:
        with torch.no_grad():
            torch._foreach_lerp_(list(self._target_critic.parameters()), list(self.model.critic.parameters()),
                                 self._theta)

    @staticmethod
    def _learn_stats(loss: torch.Tensor, stats: Dict[str, torch.Tensor]) -> Dict[str, Any]:
        q1, q2, target = stats.pop("q1"), stats.pop("q2"), stats.pop("target")
        return {"loss": loss.detach(), **stats, "q_value": q1.mean(), "target_q": target.mean(),
                "priority": ((q1 - target).abs() + (q2 - target).abs()) / 2}

    def _batch_loss(self, batch: Any) -> tuple:
        """The batch on the learner's device as the loss takes it, and ``_loss`` of it (the critics' rows weighed
        by ``batch.weight`` with importance weights)."""
        dev = self.device
        scale, bias = self._affine(dev)  # kept on the device: a copy from the host each update cannot be captured
        obs = model_obs(batch.obs, dev, self.normalisation)
        next_obs = model_obs(batch.next_obs, dev, self.normalisation)
        action = (batch.action.to(dev).float() - bias) / scale
        reward = batch.reward.to(dev).float()
        discount = batch.discount.to(dev).float()
        terminated = batch.terminated.to(dev)
        weight = batch.weight.to(dev).float() if self._use_weight else None
        return self._loss(obs, action, next_obs, reward, discount, terminated, weight)

    @hot_path("learn")
    def _loss(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor, reward: torch.Tensor,
              discount: torch.Tensor, terminated: torch.Tensor, weight: Optional[torch.Tensor]) -> tuple:
        """The learner's hot path (compiled with ``policy.compile``): ``(loss, detached statistics)``."""
        alpha = self.model.log_alpha.detach().exp()
        q1, q2, new_logp, q_new, next_action, next_logp = self.learn_model(obs, action, next_obs)
        with torch.no_grad():
            q1_next, q2_next = self._target_critic(next_obs, next_action)
            target = sac_target(reward, discount, terminated, q1_next, q2_next, next_logp, alpha)
        q_loss = _weighted_mse(q1, target, weight) + _weighted_mse(q2, target, weight)
        policy_loss = (alpha * new_logp - q_new).mean()
        loss = q_loss + policy_loss
        if self._auto_alpha:
            alpha_loss = -(self.model.log_alpha * (new_logp.detach() + self._target_entropy)).mean()
            loss = loss + alpha_loss
        return loss, {"q_loss": q_loss.detach(), "policy_loss": policy_loss.detach(), "alpha": alpha,
                      "entropy": -new_logp.detach().mean(), "q1": q1.detach(), "q2": q2.detach(), "target": target}

    # ---- act -------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward_collect(self, obs: Obs, random: bool = False) -> Dict[str, torch.Tensor]:
        """A sample of the squashed Gaussian in env units; uniform over the bounds when ``random``; drawn on the
        collect device."""
        device = self.mode_devices["collect"]
        if random:
            generator = self._generators.on(device)
            squashed = 2 * torch.rand((num_rows(obs), self._action_dim), generator=generator, device=device) - 1
        else:
            squashed = self._sample(self.placement.actor("collect"), self._obs(obs, "collect"))
        return {"action": self._to_env(squashed)}

    @torch.inference_mode()
    def _forward_eval(self, obs: Obs) -> Dict[str, torch.Tensor]:
        return {"action": self._to_env(self._mean_action(self.placement.actor("eval"), self._obs(obs, "eval")))}

    def _obs(self, obs: Any, mode: str) -> Any:
        """Acting observations as the networks take them on ``mode``'s device (``policies.normalisation.model_obs``)."""
        return model_obs(obs, self.mode_devices[mode], self.normalisation)

    def _to_env(self, squashed: torch.Tensor) -> torch.Tensor:
        """Squashed actions in (-1, 1) in env units, on their device."""
        scale, bias = self._affine(squashed.device)
        return squashed * scale + bias

    def greedy_module(self) -> torch.nn.Module:
        """``tanh`` of the Gaussian mean, scaled to the bounds (``Policy.greedy_module``)."""
        return GreedyActor(TanhMean(self.model.actor), discrete=False, scale=self._scale.numpy(),
                           bias=self._bias.numpy(), preprocess=self.normalisation.frozen_obs_norm())

    # the acting hot paths (compiled with policy.compile)
    @hot_path("collect")
    def _sample(self, model: SACModel, obs: torch.Tensor) -> torch.Tensor:
        return model.sample(obs)[0]

    @hot_path("eval", name="mean")
    def _mean_action(self, model: SACModel, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(model.actor(obs)[0])

    # ---- state -----------------------------------------------------------------------------------
    _checkpointed = (("model", "model"), ("target_critic", "_target_critic"))

    def optimizer_settings(self) -> List[Dict[str, float]]:
        """The config's settings per parameter group (``policies.optim``): critic, actor and, with
        ``auto_alpha``, the temperature."""
        learn = self.params.learn
        rates = [learn.learning_rate_q, learn.learning_rate_policy]
        if learn.auto_alpha:
            rates.append(learn.learning_rate_alpha)
        return [dict(lr=lr) for lr in rates]


def _weighted_mse(q: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor]) -> torch.Tensor:
    err = (q - target) ** 2
    return (err * weight).mean() if weight is not None else err.mean()
