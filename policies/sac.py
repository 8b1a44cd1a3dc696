"""Soft Actor-Critic (Haarnoja et al., 2018): twin Q, target critics with soft update, a tanh-squashed
Gaussian actor, automatic entropy tuning.

One update, on one screen (``_critic_loss`` then ``_actor_pass``; ``_update`` drives them: batch in, each loss's
backward and step, targets)::

    alpha      = exp(log_alpha)                                   (as it is before this update's steps)
    a', logp'  ~ pi(.|s')                                         (no gradient)
    target     = r + discount * (1 - terminated) * (min_i Qtarg_i(s', a') - alpha * logp')
    q_loss     = mean((Q1(s, a) - target)^2) + mean((Q2(s, a) - target)^2)
    critics   <- Adam step on q_loss
    a~, logp~  ~ pi(.|s)                                          (reparameterized)
    pi_loss    = mean(alpha * logp~ - min_i Q_i(s, a~))           (the critics just stepped, parameters held fixed)
    alpha_loss = -mean(log_alpha * (logp~ + target_entropy))      (auto_alpha)
    actor, log_alpha <- Adam step on pi_loss + alpha_loss
    targets   <- Polyak(target_theta) towards the online critics
    loss       = q_loss + pi_loss (+ alpha_loss)                  (reported)

SB3's order (CleanRL's too steps the critics first): the actor is rated by the critics after their step, and
the whole update weighs entropy by the temperature it started with. Two differences from SB3's code, neither of
which changes an Adam step: its critic loss is half of ``q_loss`` (Adam is scale-invariant but for its eps), and
it draws the sample of ``s`` before that of ``s'``. One optimizer over the three (a parameter group per learning
rate): each step holds the others' parameters out of it, so the networks and their Adam moments change exactly as
with three optimizers. Under DDP (the ddp middleware wraps the whole model) each pass adds 0 times the sum of the
parameters it does not use (``policies.optim.zero_for_ddp``), so that DDP's backward has every parameter's
gradient: an update is two backwards, two all-reduces. Actions are stored in env units and mapped to (-1, 1) for
the networks.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

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
from .continuous_models import (EncodedActorCriticModelParams, ObsInput, SquashedGaussianActor, TwinQ, critic_pass,
                                held, model_input)
from .optim import OptimizerStep, zero_for_ddp
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
    own encoder (``policies.continuous_models.TwinQ`` says why), configured by ``encoders``
    (``policy.model.encoders``)."""

    def __init__(self, obs: ObsInput, action_dim: int, actor_hidden: Any, critic_hidden: Any, init_alpha: float,
                 auto_alpha: bool, encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.actor = SquashedGaussianActor(obs, action_dim, actor_hidden, encoders)
        self.critic = TwinQ(obs, action_dim, critic_hidden, encoders)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)), requires_grad=auto_alpha)

    def sample_action(self, obs: Any) -> torch.Tensor:
        """``sample``'s action alone, from the same random numbers: acting reads no log-probability, whose 9 ops
        each eager acting step paid for (a launch each on a GPU)."""
        mean, log_std = self.actor(obs)
        return torch.tanh(mean + log_std.exp() * torch.randn_like(mean))

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

    def forward(self, obs: Any, action: torch.Tensor, actor: bool = True, critics: bool = True) -> tuple:
        """``(Q_i(s, a) for both critics)``, the log-probability of the actor's reparameterized sample of ``obs``,
        the smaller critic's value of it through the critics' parameters detached (so the actor's loss moves the
        actor only) and ``log_alpha`` (a copy taken here: DDP with ``find_unused_parameters`` counts as used only
        the parameters a forward's outputs reach); ``actor=False``: the critics' values and three Nones;
        ``critics=False``: None for the critics' values. The critic encodes ``obs`` once: the sample is rated on
        those features detached, which is exact (they do not depend on the actor)."""
        features, qs = critic_pass(self.critic, obs, action, critics)
        if not actor:
            return qs, None, None, None
        new_action, new_logp = self.sample(obs)
        q1_new, q2_new = functional_call(self.critic, held(self.critic), (features.detach(), new_action),
                                         {"encoded": True})
        return qs, new_logp, torch.min(q1_new, q2_new), self.log_alpha.clone()


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
        self._critic_params = list(self.model.critic.parameters())
        actor_params = list(self.model.actor.parameters())
        self._actor_params = [*actor_params, self.model.log_alpha]  # what the second step moves (the first holds)
        # one group per setting: the temperature's only with auto_alpha (zip stops at the settings)
        params = [self._critic_params, actor_params, [self.model.log_alpha]]
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
        step = self.optimizer_step.step
        stats, _ = self._update(batch, lambda loss, hold, last: step(loss, hold=hold, count=last))
        return stats

    def _graph_update(self, batch: Any, count: torch.Tensor, number: int) -> tuple:
        """``_forward_learn`` with nothing read on the host (``policies.update_graph``: ``policy.compile=
        'cudagraph_update'``): ``(statistics, priority, non-finite flag)``."""
        step = self.optimizer_step.graph_step  # the update count is the graph program's
        stats, bad = self._update(batch, lambda loss, hold, _: step(loss, hold=hold))
        return stats, stats.pop("priority"), bad

    def _update(self, batch: Any, step: Callable[[torch.Tensor, List[nn.Parameter], bool], Any]) -> tuple:
        """One update (the module docstring's order): the critics' loss and ``step`` (actor and temperature held
        out), the actor's and the temperature's losses through the critics just stepped and their ``step`` (the
        critics held out), the targets. ``step(loss, hold, last)``: ``last`` on the update's last step (the one
        that counts it, so both steps' loss checks name the same update). Returns the statistics and the steps'
        non-finite flag (``step``'s returns or-ed: the captured update's; None eagerly)."""
        obs, action, next_obs, reward, discount, terminated, weight = self._learn_batch(batch)
        alpha = self.model.log_alpha.detach().exp()  # a new tensor: the actor's step does not change it
        q_loss, stats = self._critic_loss(obs, action, next_obs, reward, discount, terminated, weight, alpha)
        bad = step(q_loss, self._actor_params, False)
        actor_loss, actor_stats = self._actor_pass(obs, action, alpha)
        actor_bad = step(actor_loss, self._critic_params, True)
        bad = None if bad is None else bad | actor_bad
        self._update_target()
        return self._learn_stats(q_loss.detach() + actor_loss.detach(), {**stats, **actor_stats}), bad

    def _update_target(self) -> None:
        with torch.no_grad():
            torch._foreach_lerp_(list(self._target_critic.parameters()), list(self.model.critic.parameters()),
                                 self._theta)

    @staticmethod
    def _learn_stats(loss: torch.Tensor, stats: Dict[str, torch.Tensor]) -> Dict[str, Any]:
        q1, q2, target = stats.pop("q1"), stats.pop("q2"), stats.pop("target")
        return {"loss": loss, **stats, "q_value": q1.mean(), "target_q": target.mean(),
                "priority": ((q1 - target).abs() + (q2 - target).abs()) / 2}

    def _learn_batch(self, batch: Any) -> tuple:
        """The batch on the learner's device as the losses take it: ``(obs, action in (-1, 1), next_obs, reward,
        discount, terminated, weight)``, ``weight`` being the importance weights of the critics' rows (None
        without them)."""
        dev = self.device
        scale, bias = self._affine(dev)  # kept on the device: a copy from the host each update cannot be captured
        obs = model_obs(batch.obs, dev, self.normalisation)
        next_obs = model_obs(batch.next_obs, dev, self.normalisation)
        action = (batch.action.to(dev).float() - bias) / scale
        reward, discount = batch.reward.to(dev).float(), batch.discount.to(dev).float()
        weight = batch.weight.to(dev).float() if self._use_weight else None
        return obs, action, next_obs, reward, discount, batch.terminated.to(dev), weight

    @hot_path("learn", name="loss")
    def _critic_loss(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor, reward: torch.Tensor,
                     discount: torch.Tensor, terminated: torch.Tensor, weight: Optional[torch.Tensor],
                     alpha: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``(q_loss, detached statistics)``: the first of the learner's hot paths (compiled with
        ``policy.compile``)."""
        with torch.no_grad():
            next_action, next_logp = self.model.sample(next_obs)
            q1_next, q2_next = self._target_critic(next_obs, next_action)
            target = sac_target(reward, discount, terminated, q1_next, q2_next, next_logp, alpha)
        (q1, q2), *_ = self.learn_model(obs, action, actor=False)
        q_loss = _weighted_mse(q1, target, weight) + _weighted_mse(q2, target, weight)
        stats = {"q_loss": q_loss.detach(), "q1": q1.detach(), "q2": q2.detach(), "target": target}
        return q_loss + zero_for_ddp(self.learn_model, self._actor_params), stats

    @hot_path("learn", name="actor_loss")
    def _actor_pass(self, obs: torch.Tensor, action: torch.Tensor,
                    alpha: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``(pi_loss (+ alpha_loss), detached statistics)`` through the critics as they are now (after their
        step): the second hot path."""
        _, new_logp, q_new, log_alpha = self.learn_model(obs, action, critics=False)
        policy_loss = (alpha * new_logp - q_new).mean()
        loss = policy_loss + zero_for_ddp(self.learn_model, self._critic_params)
        if self._auto_alpha:
            loss = loss - (log_alpha * (new_logp.detach() + self._target_entropy)).mean()
        return loss, {"policy_loss": policy_loss.detach(), "alpha": alpha, "entropy": -new_logp.detach().mean()}

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
        return model.sample_action(obs)

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
