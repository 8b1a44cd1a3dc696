"""TD3+BC (Fujimoto & Gu, 2021): TD3 on a fixed dataset, its actor pulled towards the dataset's actions by
a behaviour-cloning term.

One update, on one screen (``_loss``; ``_forward_learn`` drives it: batch in, backward, step, targets);
actions in (-1, 1)::

    a'          = clip(pi_targ(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), -1, 1)   (smoothing)
    target      = r + discount * (1 - terminated) * min_i Qtarg_i(s', a')                        (no gradient)
    q_loss      = mean((Q1(s, a) - target)^2) + mean((Q2(s, a) - target)^2)
    lambda      = alpha / mean|Q1(s, pi(s))|                                                     (no gradient)
    actor_loss  = -lambda * mean(Q1(s, pi(s))) + mean((pi(s) - a)^2)       (critic parameters held fixed)
    actor_step  = 1 every actor_update_freq-th update, else 0                              (TD3's delay)
    loss        = q_loss + actor_step * actor_loss
    targets    <- Polyak(target_theta) towards the online nets, on actor steps only

One forward of the learn model, ONE backward and ONE optimizer step per update, as DDP expects (the ddp
middleware wraps actor and critic together). Why the actor loss is computed on every update and weighted 0
on the others: DDP (without ``find_unused_parameters``) waits for a gradient of every parameter in every
backward, so a backward that left the actor out would fail. Why the actor's gradients are then dropped
(set to None) on those updates: Adam moves a parameter whose gradient is zero (its momentum carries on) but
skips one without a gradient, so the actor and its Adam moments change on actor steps only, as with TD3's
separate actor optimizer. Every rank counts the same updates, so all ranks agree on the actor steps.

Observations are used as the dataset stores them. The paper normalises them by the dataset's mean and
standard deviation; here the policy is built from the env's spaces before any data is read, each DDP rank
holds another shard, and Pendulum's observations are of order 1 already (cos, sin and a velocity in
[-8, 8]; scaling the velocity to [-1, 1] did not learn faster in our runs). Only ``terminated`` cuts the
bootstrap: a transition the recording truncated bootstraps from its ``next_obs``. Acting is ``pi(s)`` in env
units. Offline (``pipeline = "offline"``): it trains from ``dataset.name``, never from an env.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from engine.registry import POLICY_REGISTRY

from .base import Policy, SpaceMismatchError, common_config, make_adam, resolve_shape, space_dims
from .greedy import GreedyActor
from .models import DeterministicActor, TwinQ

__all__ = ["TD3BCPolicy", "TD3BCModel", "td3bc_actor_loss"]


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


class TD3BCModel(nn.Module):
    """The deterministic actor ``tanh(mu(s))`` and the twin critic, used through one ``forward``."""

    def __init__(self, obs_dim: int, action_dim: int, actor_hidden: Any, critic_hidden: Any) -> None:
        super().__init__()
        self.actor = DeterministicActor(obs_dim, action_dim, actor_hidden)
        self.critic = TwinQ(obs_dim, action_dim, critic_hidden)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """``Q1(s, a)``, ``Q2(s, a)``, ``pi(s)`` and ``Q1(s, pi(s))`` through the critic's parameters detached
        (so the actor loss moves the actor only)."""
        q1, q2 = self.critic(obs, action)
        pi = self.actor(obs)
        frozen = {name: p.detach() for name, p in self.critic.q1.named_parameters()}
        q_pi = functional_call(self.critic.q1, frozen, (torch.cat([obs, pi], dim=-1),)).squeeze(-1)
        return q1, q2, pi, q_pi


@POLICY_REGISTRY.register("td3bc")
class TD3BCPolicy(Policy):
    """TD3+BC for continuous actions (``create_config.policy.type='td3bc'``)."""

    pipeline = "offline"
    default_env_steps = None

    @classmethod
    def default_config(cls) -> Dict[str, Any]:
        return dict(
            **common_config(),
            discount_factor=0.99,
            model=dict(
                obs_shape=None,         # None: taken from the env's observation space
                action_shape=None,      # None: taken from the env's action space
                actor_head_hidden_size_list=[256, 256],
                critic_head_hidden_size_list=[256, 256],
            ),
            learn=dict(
                batch_size=256,
                update_per_iter=10,      # updates per loop iteration (ranks agree once per iteration)
                learning_rate_q=3e-4,
                learning_rate_policy=3e-4,
                alpha=2.5,               # weight of Q against cloning: lambda = alpha / mean|Q(s, pi(s))|
                actor_update_freq=2,     # the actor and the targets move every N-th update (TD3's delay)
                target_theta=0.005,      # Polyak rate of the target actor and critic
                policy_noise=0.2,        # target policy smoothing: std of the noise on pi_targ(s') ...
                noise_clip=0.5,          # ... clipped to +-noise_clip (both in units of half the action range)
            ),
            eval=dict(evaluator=dict(eval_freq=500, patience=10)),  # patience: evaluations without a new best
        )

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        if isinstance(action_space, gym.spaces.Discrete):  # before space_dims: its hint names online policies
            raise SpaceMismatchError(f"policy 'td3bc' needs a continuous (Box) action space, but the env's action "
                                     f"space is {action_space}: for a dataset of discrete actions use the offline "
                                     f"policy 'cql' or 'bc' (create_config.policy.type)")
        (obs_dim,), action_dim, _ = space_dims(observation_space, action_space, "td3bc", continuous=True)
        model_cfg, learn = cfg["model"], cfg["learn"]
        resolve_shape(model_cfg, "obs_shape", observation_space.shape, "td3bc",
                      f"observation shape {observation_space.shape}")
        resolve_shape(model_cfg, "action_shape", action_dim, "td3bc", f"action space {action_space}")
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise SpaceMismatchError(f"policy 'td3bc' needs a bounded action space, got {action_space}")
        if int(learn["actor_update_freq"]) < 1:
            raise ValueError(f"policy.learn.actor_update_freq must be >= 1 (1: the actor moves every update), got "
                             f"{learn['actor_update_freq']}")
        for key in ("alpha", "policy_noise", "noise_clip"):
            if not learn[key] >= 0:
                raise ValueError(f"policy.learn.{key} must be >= 0, got {learn[key]}")
        if not 0.0 < learn["target_theta"] <= 1.0:
            raise ValueError(f"policy.learn.target_theta must lie in (0, 1] (1: the targets copy the online nets), "
                             f"got {learn['target_theta']}")
        self._init_model(lambda: TD3BCModel(obs_dim, action_dim, model_cfg["actor_head_hidden_size_list"],
                                            model_cfg["critic_head_hidden_size_list"]))
        self._target_model = copy.deepcopy(self._model).requires_grad_(False)
        params = [self._model.critic.parameters(), self._model.actor.parameters()]
        self._optimizer = make_adam([dict(settings, params=group)
                                     for group, settings in zip(params, self._optimizer_settings())])
        self._gamma = float(cfg["discount_factor"])
        self._alpha = float(learn["alpha"])
        self._actor_every = int(learn["actor_update_freq"])
        self._theta = float(learn["target_theta"])
        self._policy_noise = float(learn["policy_noise"])
        self._noise_clip = float(learn["noise_clip"])
        self._scale = torch.as_tensor((action_space.high - action_space.low) / 2.0, dtype=torch.float32)
        self._bias = torch.as_tensor((action_space.high + action_space.low) / 2.0, dtype=torch.float32)
        self._action_space = action_space
        self._rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, ()).item()))
        self._updates = 0

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        dev = self.device
        obs, next_obs = batch.obs.to(dev).float(), batch.next_obs.to(dev).float()
        action = ((batch.action.to(dev).float() - self._bias.to(dev)) / self._scale.to(dev)).clamp(-1.0, 1.0)
        reward = batch.reward.to(dev).float()
        not_done = (~batch.terminated.to(dev)).float()
        actor_step = (self._updates + 1) % self._actor_every == 0  # updates 2, 4, ... with a delay of 2

        loss, stats = self._hot("loss", self._loss, "learn")(obs, action, next_obs, reward, not_done,
                                                              1.0 if actor_step else 0.0)
        self._check_finite(loss, "TD3+BC")
        self._optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if not actor_step:  # no gradient, no Adam step: the actor and its moments wait for an actor step
            for p in self._model.actor.parameters():
                p.grad = None
        self._optimizer.step()
        self._updates += 1
        if actor_step:
            with torch.no_grad():
                torch._foreach_lerp_(list(self._target_model.parameters()), list(self._model.parameters()),
                                     self._theta)
        return {"loss": loss.detach(), **stats}

    def _loss(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor, reward: torch.Tensor,
              not_done: torch.Tensor, actor_weight: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``(q_loss + actor_weight * actor_loss, detached statistics)``: the update's tensor work, actions
        in (-1, 1)."""
        # the TD target: the target actor's action with clipped noise, the smaller target critic
        with torch.no_grad():
            noise = (torch.randn_like(action) * self._policy_noise).clamp(-self._noise_clip, self._noise_clip)
            next_action = (self._target_model.actor(next_obs) + noise).clamp(-1.0, 1.0)
            q1_next, q2_next = self._target_model.critic(next_obs, next_action)
            target = reward + self._gamma * not_done * torch.min(q1_next, q2_next)
        # one forward of the learn model: the critic on the dataset's actions, the actor and its value
        q1, q2, pi, q_pi = self._learn_model(obs, action)
        q_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        actor_loss, lmbda = td3bc_actor_loss(q_pi, pi, action, self._alpha)
        loss = q_loss + actor_weight * actor_loss
        return loss, {"q_loss": q_loss.detach(), "actor_loss": actor_loss.detach(),
                      "bc_loss": F.mse_loss(pi.detach(), action), "lambda": lmbda, "q_value": q1.detach().mean(),
                      "target_q": target.mean()}

    # ---- act -------------------------------------------------------------------------------------
    def _act(self, obs: Any, mode: str) -> torch.Tensor:
        """``pi(obs)`` in (-1, 1), on the host."""
        obs_t = torch.as_tensor(np.asarray(obs), device=self.mode_devices[mode]).float()
        with torch.inference_mode():
            return self._hot("pi", self._pi, mode)(self._actor(mode), obs_t).cpu()

    def _pi(self, model: TD3BCModel, obs: torch.Tensor) -> torch.Tensor:
        """The acting forward (a hot path: ``policy.compile`` / ``policy.amp``)."""
        return model.actor(obs)

    def _forward_collect(self, obs: Any, noise: float = 0.0) -> Dict[str, Any]:
        """``pi(obs)`` plus Gaussian noise of std ``noise`` (TD3's exploration, in units of half the action
        range), clipped to the bounds, in env units."""
        action = self._act(obs, "collect")
        if noise > 0:
            action = (action + torch.as_tensor(self._rng.normal(0.0, noise, tuple(action.shape)),
                                               dtype=action.dtype)).clamp(-1.0, 1.0)
        return {"action": (action * self._scale + self._bias).numpy()}

    def _forward_eval(self, obs: Any) -> Dict[str, Any]:
        return {"action": (self._act(obs, "eval") * self._scale + self._bias).numpy()}

    def greedy_module(self) -> torch.nn.Module:
        """``pi(obs)`` scaled to the bounds (``Policy.greedy_module``)."""
        return GreedyActor(self._model.actor, discrete=False, scale=self._scale.numpy(), bias=self._bias.numpy())

    # ---- state -----------------------------------------------------------------------------------
    _checkpointed = (("model", "_model"), ("target_model", "_target_model"))

    def _optimizer_settings(self) -> List[Dict[str, float]]:
        """Critic, then actor."""
        learn = self.cfg["learn"]
        return [dict(lr=learn["learning_rate_q"]), dict(lr=learn["learning_rate_policy"])]
