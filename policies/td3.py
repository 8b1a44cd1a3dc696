"""TD3 (Fujimoto, van Hoof & Meger, 2018), and DDPG (Lillicrap et al., 2016) as its special case: a
deterministic actor, one or two critics, target copies of both.

One update, on one screen (``_loss``; ``_forward_learn`` drives it: batch in, backward, step, targets);
actions in (-1, 1), ``discount`` is gamma^n of the batch's n-step transitions::

    eps         = clip(N(0, policy_noise), -noise_clip, noise_clip)                   (target policy smoothing)
    a'          = clip(pi_targ(s') + eps, -1, 1)
    target      = r + discount * (1 - terminated) * min_i Qtarg_i(s', a')             (no gradient)
    q_loss      = sum_i mean((Q_i(s, a) - target)^2)                                  (i: both critics, or one)
    actor_loss  = -mean(Q1(s, pi(s)))                                  (critic parameters held fixed)
    actor_step  = 1 every actor_update_freq-th update, else 0                         (policy delay)
    loss        = q_loss + actor_step * actor_loss
    targets    <- Polyak(target_theta) towards the online nets, on actor steps only

DDPG is ``model.twin_critic=False``, ``learn.actor_update_freq=1``, ``learn.policy_noise=0``: registered as
``ddpg`` with those defaults. TD3+BC (``policies.td3bc``) is this update with another actor loss.

DDP: one forward of the learn model, ONE backward and ONE optimizer step per update (the ddp middleware wraps
actor and critics together). The actor loss is computed on every update and weighted 0 off actor steps,
because DDP (without ``find_unused_parameters``) waits for a gradient of every parameter in every backward.
Its gradients are then kept out of the optimizer step on those updates (Adam moves a parameter whose gradient
is zero, by its momentum, but skips one without a gradient), so the actor and its Adam moments change on actor
steps only, as with TD3's separate actor optimizer. Every rank counts the same updates, so all agree on the
actor steps.

The smoothing noise is drawn for the global batch (every rank's rows, in rank order) from a generator seeded
by ``noise_seed`` (part of the learn state, so every rank has rank 0's and a resume continues the stream) and
the update count; each rank takes its own rows. So a data-parallel update is the one-process update on the
ranks' batches joined, noise included (``baton check-ddp`` compares exactly), on any world size.

Acting: collection adds Gaussian noise of std ``collect.noise_sigma`` (units of half the action range) to
``pi(s)`` and clips to the bounds; below ``random_collect_size`` env steps it acts uniformly at random;
evaluation acts with ``pi(s)``. Actions leave in env units (scaled to the Box's bounds).
"""
from __future__ import annotations

import copy
import functools
from typing import Any, Dict, List, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from engine.distributed import get_rank, get_world_size
from engine.config_rules import ValueRules
from engine.registry import POLICY_REGISTRY

from .accel import hot_path
from .base import Policy, SpaceMismatchError, common_config, evaluator_config, resolve_shape, space_dims
from .greedy import GreedyActor
from .models import DeterministicActor, SingleQ, TwinQ
from .optim import OptimizerStep
from .placement import DeviceGenerators, PerDevice

__all__ = ["TD3Policy", "DDPGPolicy", "TD3Model", "smoothing_noise"]


class TD3Model(nn.Module):
    """The deterministic actor ``tanh(mu(s))`` and two critics (one with ``twin_critic=False``), used
    through one ``forward``."""

    def __init__(self, obs_dim: int, action_dim: int, actor_hidden: Any, critic_hidden: Any,
                 twin_critic: bool = True) -> None:
        super().__init__()
        self.actor = DeterministicActor(obs_dim, action_dim, actor_hidden)
        self.critic = (TwinQ if twin_critic else SingleQ)(obs_dim, action_dim, critic_hidden)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> Tuple[Tuple[torch.Tensor, ...], torch.Tensor,
                                                                          torch.Tensor]:
        """``(Q_i(s, a) for each critic)``, ``pi(s)`` and ``Q1(s, pi(s))`` through the first critic's parameters
        detached (so the actor loss moves the actor only)."""
        qs = self.critic(obs, action)
        pi = self.actor(obs)
        frozen = {name: p.detach() for name, p in self.critic.q1.named_parameters()}
        q_pi = functional_call(self.critic.q1, frozen, (torch.cat([obs, pi], dim=-1),)).squeeze(-1).float()
        return qs, pi, q_pi


def smoothing_noise(generator: torch.Generator, rows: int, cols: int, std: float, clip: float, rank: int = 0,
                    world_size: int = 1) -> torch.Tensor:
    """Rows ``rank * rows ... (rank + 1) * rows`` of ``clip(N(0, std), -clip, clip)`` noise drawn for a global
    batch of ``world_size * rows`` rows: the same numbers one process draws for the joined batch.

    Examples:
        >>> g = torch.Generator()
        >>> whole = smoothing_noise(g.manual_seed(5), 4, 1, 0.2, 0.5)                          # 4 rows, 1 process
        >>> second = smoothing_noise(g.manual_seed(5), 2, 1, 0.2, 0.5, rank=1, world_size=2)   # rank 1 of 2
        >>> torch.equal(second, whole[2:]), bool(whole.abs().max() <= 0.5)
        (True, True)
    """
    noise = torch.randn((rows * world_size, cols), generator=generator, device=generator.device)
    return (noise[rank * rows:(rank + 1) * rows] * std).clamp_(-clip, clip)


@POLICY_REGISTRY.register("td3")
class TD3Policy(Policy):
    """TD3 for continuous actions (``create_config.policy.type='td3'``)."""

    pipeline = "off_policy"
    action_spaces = ("continuous",)
    supports_obs_norm = True
    #: the registered name and the label of messages (subclasses set their own)
    algo, label = "td3", "TD3"
    config_rules = ValueRules(at_least_one=("policy.learn.actor_update_freq",),
                              positive=("policy.learn.learning_rate_q", "policy.learn.learning_rate_policy"),
                              not_negative=("policy.learn.policy_noise", "policy.learn.noise_clip"),
                              unit_interval=("policy.learn.target_theta",))

    @classmethod
    def default_config(cls) -> Dict[str, Any]:
        return dict(
            **common_config(),
            discount_factor=0.99,
            nstep=1,
            random_collect_size=1000,   # uniform random actions for the first env steps
            model=dict(
                obs_shape=None,         # None: taken from the env's observation space
                action_shape=None,      # None: taken from the env's action space
                actor_head_hidden_size_list=[256, 256],
                critic_head_hidden_size_list=[256, 256],
                twin_critic=True,       # False: one critic, whose value is the target (DDPG)
            ),
            learn=dict(
                update_per_collect=1,
                batch_size=256,
                learning_rate_q=3e-4,
                learning_rate_policy=3e-4,
                actor_update_freq=2,     # the actor and the targets move every N-th update (policy delay)
                target_theta=0.005,      # Polyak rate of the target actor and critics
                policy_noise=0.2,        # target policy smoothing: std of the noise on pi_targ(s') ...
                noise_clip=0.5,          # ... clipped to +-noise_clip (both in units of half the action range)
            ),
            collect=dict(
                n_sample=1,
                noise_sigma=0.1,         # std of the exploration noise on pi(s) (units of half the action range)
            ),
            eval=evaluator_config(eval_freq=1000),
            other=dict(replay_buffer=dict(replay_buffer_size=1000000,
                                          device=None)),  # None/"cpu", "learn", "cuda[:N]"
        )

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        self._check_action_space(action_space)
        (obs_dim,), action_dim, _ = space_dims(observation_space, action_space, self.algo, continuous=True)
        model_cfg, learn = cfg["model"], cfg["learn"]
        resolve_shape(model_cfg, "obs_shape", observation_space.shape, self.algo,
                      f"observation shape {observation_space.shape}")
        resolve_shape(model_cfg, "action_shape", action_dim, self.algo, f"action space {action_space}")
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise SpaceMismatchError(f"policy {self.algo!r} needs a bounded action space (its actions are scaled "
                                     f"to the bounds), got {action_space}")
        _check_learn_config(learn)
        twin = bool(model_cfg.get("twin_critic", True))
        actor_hidden, critic_hidden = model_cfg["actor_head_hidden_size_list"], model_cfg["critic_head_hidden_size_list"]
        self.model = self.placement.build(lambda: TD3Model(obs_dim, action_dim, actor_hidden, critic_hidden, twin))
        self._target_model = copy.deepcopy(self.model).requires_grad_(False)
        self._actor_params = list(self.model.actor.parameters())
        params = [self.model.critic.parameters(), self._actor_params]
        self.optimizer_step = OptimizerStep.adam(params, self.optimizer_settings(), self.label)
        self._gamma = float(cfg["discount_factor"])
        self._actor_every = int(learn["actor_update_freq"])
        self._theta = float(learn["target_theta"])
        self._policy_noise = float(learn["policy_noise"])
        self._noise_clip = float(learn["noise_clip"])
        self._explore_sigma = float((cfg.get("collect") or {}).get("noise_sigma", 0.0))
        if not self._explore_sigma >= 0:
            raise ValueError(f"policy.collect.noise_sigma must be >= 0 (0: act with pi(s) alone), got "
                             f"{self._explore_sigma}")
        self._scale = torch.as_tensor((action_space.high - action_space.low) / 2.0, dtype=torch.float32)
        self._bias = torch.as_tensor((action_space.high + action_space.low) / 2.0, dtype=torch.float32)
        self._learn_scale, self._learn_bias = self._scale.to(self.device), self._bias.to(self.device)
        self._action_dim = action_dim
        self._generators = DeviceGenerators()  # exploration noise and the random warm-up, on the collect device
        self._affine = PerDevice.copies(self._scale, self._bias)
        self._noise_seed = int(torch.randint(0, 2**31 - 1, ()).item())
        self._noise_generator = torch.Generator(device=self.device)

    def _check_action_space(self, action_space: gym.Space) -> None:
        """A subclass's own refusal of an action space, before the generic one of ``space_dims``."""

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        dev = self.device
        norm_obs = self.normalisation.norm_obs
        obs, next_obs = norm_obs(batch.obs.to(dev).float()), norm_obs(batch.next_obs.to(dev).float())
        action = ((batch.action.to(dev).float() - self._learn_bias) / self._learn_scale).clamp(-1.0, 1.0)
        reward = batch.reward.to(dev).float()
        bootstrap = self._discount(batch) * (~batch.terminated.to(dev)).float()
        noise = self._smoothing_noise(*action.shape)
        actor_step = (self.optimizer_step.updates + 1) % self._actor_every == 0  # updates 2, 4, ... (delay 2)

        loss, stats = self._loss(obs, action, next_obs, reward, bootstrap, noise, 1.0 if actor_step else 0.0)
        # off actor steps the actor's (zero-weighted) gradients are held out of the step: the backward did reach
        # every parameter (what DDP needs and check-ddp reads), and Adam skips a parameter without a gradient
        self.optimizer_step.step(loss, hold=() if actor_step else self._actor_params)
        if actor_step:
            with torch.no_grad():
                torch._foreach_lerp_(list(self._target_model.parameters()), list(self.model.parameters()),
                                     self._theta)
        return {"loss": loss.detach(), **stats}

    def _discount(self, batch: Any) -> torch.Tensor | float:
        """gamma^n of each transition (the collector's n-step returns)."""
        return batch.discount.to(self.device).float()

    def _smoothing_noise(self, rows: int, cols: int) -> torch.Tensor:
        """This rank's rows of the update's smoothing noise (module docstring: the same numbers on any world
        size)."""
        if self._policy_noise == 0.0:
            return torch.zeros((rows, cols), device=self.device)
        self._noise_generator.manual_seed((self._noise_seed * 1_000_003 + self.optimizer_step.updates) % 2**63)
        return smoothing_noise(self._noise_generator, rows, cols, self._policy_noise, self._noise_clip, get_rank(),
                               get_world_size())

    @hot_path("learn")
    def _loss(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor, reward: torch.Tensor,
              bootstrap: torch.Tensor, noise: torch.Tensor,
              actor_weight: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``(q_loss + actor_weight * actor_loss, detached statistics)``: the update's tensor work, actions in
        (-1, 1); ``bootstrap`` is ``discount * (1 - terminated)``."""
        # the TD target: the target actor's action with clipped noise, the smallest target critic
        with torch.no_grad():
            next_action = (self._target_model.actor(next_obs) + noise).clamp(-1.0, 1.0)
            q_next = functools.reduce(torch.minimum, self._target_model.critic(next_obs, next_action))
            target = reward + bootstrap * q_next
        # one forward of the learn model: the critics on the batch's actions, the actor and its value
        qs, pi, q_pi = self.learn_model(obs, action)
        q_loss = sum(F.mse_loss(q, target) for q in qs)
        actor_loss, actor_stats = self._actor_loss(q_pi, pi, action)
        loss = q_loss + actor_weight * actor_loss
        return loss, {"q_loss": q_loss.detach(), "actor_loss": actor_loss.detach(), **actor_stats,
                      "q_value": qs[0].detach().mean(), "target_q": target.mean()}

    def _actor_loss(self, q_pi: torch.Tensor, pi: torch.Tensor,
                    action: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``-mean(Q1(s, pi(s)))`` and no further statistics."""
        return -q_pi.mean(), {}

    # ---- act -------------------------------------------------------------------------------------
    def _act(self, obs: torch.Tensor, mode: str) -> torch.Tensor:
        """``pi(obs)`` in (-1, 1), on ``mode``'s device."""
        obs = self.normalisation.norm_obs(obs.to(self.mode_devices[mode]).float())
        with torch.inference_mode():
            return self._pi[mode](self.placement.actor(mode), obs)

    @hot_path("collect", "eval")
    def _pi(self, model: TD3Model, obs: torch.Tensor) -> torch.Tensor:
        """The acting forward (a hot path: ``policy.compile`` / ``policy.amp``)."""
        return model.actor(obs)

    def _forward_collect(self, obs: torch.Tensor, random: bool = False,
                         noise: Optional[float] = None) -> Dict[str, torch.Tensor]:
        """``pi(obs)`` plus Gaussian noise of std ``noise`` (default ``collect.noise_sigma``), clipped to the
        bounds, in env units; uniform over the bounds when ``random`` (the warm-up). Drawn on the collect
        device."""
        device = self.mode_devices["collect"]
        generator = self._generators.on(device)
        if random:
            action = 2 * torch.rand((len(obs), self._action_dim), generator=generator, device=device) - 1
            return {"action": self._to_env(action)}
        action = self._act(obs, "collect")
        sigma = self._explore_sigma if noise is None else float(noise)
        if sigma > 0:
            noise_draw = torch.randn(action.shape, generator=generator, device=device, dtype=action.dtype)
            action = (action + sigma * noise_draw).clamp(-1.0, 1.0)
        return {"action": self._to_env(action)}

    def _forward_eval(self, obs: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"action": self._to_env(self._act(obs, "eval"))}

    def _to_env(self, action: torch.Tensor) -> torch.Tensor:
        """Actions in [-1, 1] in env units, on their device."""
        scale, bias = self._affine(action.device)
        return action * scale + bias

    def greedy_module(self) -> torch.nn.Module:
        """``pi(obs)`` scaled to the bounds (``Policy.greedy_module``)."""
        return GreedyActor(self.model.actor, discrete=False, scale=self._scale.numpy(), bias=self._bias.numpy(),
                           preprocess=self.normalisation.frozen_obs_norm())

    # ---- state -----------------------------------------------------------------------------------
    _checkpointed = (("model", "model"), ("target_model", "_target_model"))

    def state_dict(self) -> Dict[str, Any]:
        return dict(super().state_dict(), noise_seed=self._noise_seed)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Also the smoothing noise's seed; a checkpoint written before it was kept (TD3+BC's) leaves this
        policy's own."""
        super().load_state_dict(state)
        if "noise_seed" in state:
            self._noise_seed = int(state["noise_seed"])

    def optimizer_settings(self) -> List[Dict[str, float]]:
        """The config's settings per parameter group (``policies.optim``): critics, then actor."""
        learn = self.cfg["learn"]
        return [dict(lr=learn["learning_rate_q"]), dict(lr=learn["learning_rate_policy"])]


@POLICY_REGISTRY.register("ddpg")
class DDPGPolicy(TD3Policy):
    """DDPG (``create_config.policy.type='ddpg'``): TD3 with one critic, no policy delay and no target
    smoothing (its defaults; every TD3 key still applies)."""

    algo, label = "ddpg", "DDPG"

    @classmethod
    def default_config(cls) -> Dict[str, Any]:
        cfg = super().default_config()
        cfg["model"]["twin_critic"] = False
        cfg["learn"].update(actor_update_freq=1, policy_noise=0.0)
        return cfg


def _check_learn_config(learn: Mapping[str, Any]) -> None:
    """The ``policy.learn`` values every TD3 variant shares, each error naming its key."""
    if int(learn["actor_update_freq"]) < 1:
        raise ValueError(f"policy.learn.actor_update_freq must be >= 1 (1: the actor moves every update), got "
                         f"{learn['actor_update_freq']}")
    for key in ("policy_noise", "noise_clip"):
        if not learn[key] >= 0:
            raise ValueError(f"policy.learn.{key} must be >= 0, got {learn[key]}")
    if not 0.0 < learn["target_theta"] <= 1.0:
        raise ValueError(f"policy.learn.target_theta must lie in (0, 1] (1: the targets copy the online nets), got "
                         f"{learn['target_theta']}")
