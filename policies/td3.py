"""TD3 (Fujimoto, van Hoof & Meger, 2018), and DDPG (Lillicrap et al., 2016) as its special case: a
deterministic actor, one or two critics, target copies of both.

One update, on one screen (``_critic_loss`` then ``_actor_pass``; ``_update`` drives them: batch in, each loss's
backward and step, targets); actions in (-1, 1), ``discount`` is gamma^n of the batch's n-step transitions::

    eps         = clip(N(0, policy_noise), -noise_clip, noise_clip)                   (target policy smoothing)
    a'          = clip(pi_targ(s') + eps, -1, 1)
    target      = r + discount * (1 - terminated) * min_i Qtarg_i(s', a')             (no gradient)
    q_loss      = sum_i mean((Q_i(s, a) - target)^2)                                  (i: both critics, or one)
    critics    <- Adam step on q_loss
    every actor_update_freq-th update (policy delay), with the critics just stepped (the TD3 paper's order):
      actor_loss  = -mean(Q1(s, pi(s)))                               (critic parameters held fixed)
      actor      <- Adam step on actor_loss
      targets    <- Polyak(target_theta) towards the online nets
    loss        = q_loss (+ actor_loss on an actor step)                              (reported)

DDPG is ``model.twin_critic=False``, ``learn.actor_update_freq=1``, ``learn.policy_noise=0``: registered as
``ddpg`` with those defaults. TD3+BC (``policies.td3bc``) is this update with another actor loss.

One optimizer over both (a parameter group each): each step holds the other's parameters out of it (Adam moves a
parameter whose gradient is zero, by its momentum, but skips one without a gradient), so the critics and the
actor, and their Adam moments, change exactly as with TD3's two optimizers. In one process each pass computes
only what its loss needs: the critics' pass has no actor, the actor's pass no ``Q_i(s, a)``.

DDP (the ddp middleware wraps actor and critics together): DDP without ``find_unused_parameters`` waits for a
gradient of every parameter in every backward, so under DDP each pass adds 0 times the sum of the parameters it
does not use (a zero gradient for each, computed without their forward; ``policies.optim.zero_for_ddp``). An
actor step is two backwards, so two all-reduces. Every rank counts the same updates, so all agree on the actor steps.

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
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from data.obs import Obs, num_rows
from data.replay import ReplayBufferParams
from engine.distributed import get_rank, get_world_size
from engine.params import Params, param, section
from engine.registry import POLICY_REGISTRY

from .accel import hot_path
from .base import Policy, SpaceMismatchError
from .defaults import CollectParams, OffPolicyParams, OnlineEvalParams
from .greedy import GreedyActor
from .continuous_models import (ActorCriticModelParams, DeterministicActor, EncodedActorCriticModelParams,  # noqa: F401
                                ObsInput, SingleQ, TwinQ, critic_pass, held, model_input)
from .normalisation import model_obs
from .optim import OptimizerStep, zero_for_ddp
from .placement import DeviceGenerators, PerDevice

__all__ = ["TD3Policy", "DDPGPolicy", "TD3Model", "smoothing_noise", "TD3Params", "DDPGParams",
           "ActorCriticModelParams", "TD3ModelParams", "TD3UpdateParams", "TD3LearnParams", "TD3CollectParams",
           "TD3OtherParams", "EncodedActorCriticModelParams", "model_input"]


class TD3Model(nn.Module):
    """The deterministic actor ``tanh(mu(s))`` and two critics (one with ``twin_critic=False``), used
    through one ``forward``. ``obs``: a flat observation's size, or a Dict/Tuple observation space, for which
    the actor and the critics each have their own encoder (``policies.continuous_models.TwinQ`` says why), configured by
    ``encoders`` (``policy.model.encoders``)."""

    def __init__(self, obs: ObsInput, action_dim: int, actor_hidden: Any, critic_hidden: Any,
                 twin_critic: bool = True, encoders: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.actor = DeterministicActor(obs, action_dim, actor_hidden, encoders)
        self.critic = (TwinQ if twin_critic else SingleQ)(obs, action_dim, critic_hidden, encoders)

    def forward(self, obs: Obs, action: torch.Tensor, actor: bool = True,
                critics: bool = True) -> Tuple[Any, Any, Any]:
        """``(Q_i(s, a) for each critic)``, ``pi(s)`` and ``Q1(s, pi(s))`` through the first critic's parameters
        detached (so the actor loss moves the actor only); ``actor=False``: the critics' values and two Nones;
        ``critics=False``: None for the critics' values. The critic encodes ``obs`` once: ``Q1(s, pi(s))`` takes
        those features detached, which is exact (they do not depend on the actor)."""
        features, qs = critic_pass(self.critic, obs, action, critics)
        if not actor:
            return qs, None, None
        pi = self.actor(obs)
        q1 = self.critic.q1
        q_pi = functional_call(q1, held(q1), (torch.cat([features.detach(), pi], dim=-1),))
        return qs, pi, q_pi.squeeze(-1).float()


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


@dataclass
class TD3ModelParams(EncodedActorCriticModelParams):
    """TD3's and DDPG's ``policy.model``."""

    twin_critic: bool = param(True)
    """Two critics, the TD target bootstrapping from the smaller of their targets' values (TD3's clipped double
    Q, against overestimation); False: one critic, whose target's value is used (DDPG)."""


@dataclass
class TD3UpdateParams(Params):
    """The ``policy.learn`` keys of TD3's update, whether it learns from its own collection or from a dataset
    (TD3's adds the updates per collect, TD3+BC's the updates per iteration and its cloning weight)."""

    batch_size: int = param(256, rule="at_least_one")
    """Transitions per update."""
    learning_rate_q: float = param(3e-4, rule="positive")
    """Adam's learning rate of the critics."""
    learning_rate_policy: float = param(3e-4, rule="positive")
    """Adam's learning rate of the actor."""
    actor_update_freq: int = param(2, rule="at_least_one")
    """The actor and the targets move every N-th update (TD3's policy delay: the critics settle between actor
    steps); 1: every update (DDPG)."""
    target_theta: float = param(0.005, rule="unit_interval")
    """Polyak rate of the target actor and critics, on actor steps: ``target += theta * (online - target)``.
    1: the targets copy the online nets; 0 is refused when the policy is built (they would never move)."""
    policy_noise: float = param(0.2, rule="not_negative")
    """Target policy smoothing: the std of the Gaussian noise added to ``pi_targ(s')`` in the TD target, in
    units of half the action range, so that the critic cannot exploit a narrow peak of its own; 0: none."""
    noise_clip: float = param(0.5, rule="not_negative")
    """The smoothing noise is clipped to +-noise_clip (units of half the action range)."""


@dataclass
class TD3LearnParams(TD3UpdateParams):
    """TD3's and DDPG's ``policy.learn``."""

    update_per_collect: int = param(1, rule="at_least_one")
    """Updates after each collect of ``collect.n_sample`` transitions (both 1: one update per env step)."""


@dataclass
class TD3CollectParams(CollectParams):
    """TD3's and DDPG's ``policy.collect``."""
    noise_sigma: float = param(0.1)
    """Exploration: the std of the Gaussian noise added to ``pi(s)`` while collecting, in units of half the
    action range (the action is then clipped to the bounds); 0: act with ``pi(s)`` alone. A negative value is
    refused when the policy is built."""


@dataclass
class TD3OtherParams(Params):
    """TD3's and DDPG's ``policy.other``."""

    replay_buffer: ReplayBufferParams = section(ReplayBufferParams, replay_buffer_size=1_000_000)
    """The replay buffer, sampled uniformly (``data.replay.ReplayBufferParams``)."""


@dataclass
class TD3Params(OffPolicyParams):
    """TD3's ``policy`` section (``TD3Policy``; the update is in the module docstring)."""

    model: TD3ModelParams = section(TD3ModelParams)
    """The actor and the critics."""
    learn: TD3LearnParams = section(TD3LearnParams)
    """The update: batch, learning rates, policy delay, targets, target smoothing."""
    collect: TD3CollectParams = section(TD3CollectParams, n_sample=1)
    """Collection and its exploration noise."""
    eval: OnlineEvalParams = section(OnlineEvalParams, evaluator=dict(eval_freq=1000))
    """Evaluation, every 1000 learner updates by default."""
    other: TD3OtherParams = section(TD3OtherParams)
    """The replay buffer."""


@dataclass
class DDPGParams(TD3Params):
    """DDPG's ``policy`` section: TD3's with one critic, no policy delay and no target smoothing."""

    model: TD3ModelParams = section(TD3ModelParams, twin_critic=False)
    """The actor and one critic."""
    learn: TD3LearnParams = section(TD3LearnParams, actor_update_freq=1, policy_noise=0.0)
    """TD3's update with the actor moving on every update and no target smoothing."""


@POLICY_REGISTRY.register("td3")
class TD3Policy(Policy):
    """TD3 for continuous actions (``create_config.policy.type='td3'``)."""

    pipeline = "off_policy"
    action_spaces = ("continuous",)
    supports_obs_norm = True
    #: the registered name and the label of messages (subclasses set their own)
    algo, label = "td3", "TD3"
    #: Dict/Tuple observations are encoded key by key (``policy.model.encoders``)
    structured_obs = True
    Params = TD3Params

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        self._check_action_space(action_space)
        obs_in, action_dim = model_input(cfg, observation_space, action_space, self.algo, self.structured_obs)
        model, learn = self.params.model, self.params.learn
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise SpaceMismatchError(f"policy {self.algo!r} needs a bounded action space (its actions are scaled "
                                     f"to the bounds), got {action_space}")
        if learn.target_theta == 0:  # the rest of (0, 1] is the key's rule, checked at compile time
            raise ValueError(f"policy.learn.target_theta must lie in (0, 1] (1: the targets copy the online nets), "
                             f"got {learn.target_theta}")
        twin = getattr(model, "twin_critic", True)  # TD3+BC's model has no such key: two critics
        actor_hidden, critic_hidden = model.actor_head_hidden_size_list, model.critic_head_hidden_size_list
        encoders = getattr(model, "encoders", None)  # a model section without them: flat observations
        self.model = self.placement.build(lambda: TD3Model(obs_in, action_dim, actor_hidden, critic_hidden, twin,
                                                           encoders))
        self._target_model = copy.deepcopy(self.model).requires_grad_(False)
        self._actor_params = list(self.model.actor.parameters())
        self._critic_params = list(self.model.critic.parameters())
        params = [self._critic_params, self._actor_params]
        self.optimizer_step = OptimizerStep.adam(params, self.optimizer_settings(), self.label)
        self._gamma = float(self.params.discount_factor)
        self._actor_every = int(learn.actor_update_freq)
        self._theta = float(learn.target_theta)
        self._policy_noise = float(learn.policy_noise)
        self._noise_clip = float(learn.noise_clip)
        collect = getattr(self.params, "collect", None)  # TD3+BC's section has none: it never collects
        self._explore_sigma = float(collect.noise_sigma) if collect is not None else 0.0
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
        self._last_actor_stats: Dict[str, torch.Tensor] = {}  # reported by an update without an actor pass

    def _check_action_space(self, action_space: gym.Space) -> None:
        """A subclass's own refusal of an action space, before the generic one of ``space_dims``."""

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        actor_step = (self.optimizer_step.updates + 1) % self._actor_every == 0  # updates 2, 4, ... (delay 2)
        step = self.optimizer_step.step
        return self._update(batch, self._smoothing_noise, actor_step, lambda loss, hold, last: step(
            loss, hold=hold, count=last))[0]

    def _graph_update(self, batch: Any, count: torch.Tensor, number: int) -> tuple:
        """``_forward_learn`` with nothing read on the host (``policies.update_graph``: ``policy.compile=
        'cudagraph_update'``), as update ``number`` (exact modulo ``graph_period``: the actor's delay, so each
        phase is a graph of its own). Its smoothing noise comes from torch's generator on the device
        (``_graph_noise``). Returns ``(statistics, None, non-finite flag)``: TD3 keeps no priorities."""
        actor_step = number % self._actor_every == 0
        step = self.optimizer_step.graph_step  # the update count is the graph program's
        stats, bad = self._update(batch, self._graph_noise, actor_step, lambda loss, hold, _: step(loss, hold=hold))
        return stats, None, bad

    def _update(self, batch: Any, noise: Callable[[int, int], torch.Tensor], actor_step: bool,
                step: Callable[[torch.Tensor, List[nn.Parameter], bool], Any]) -> Tuple[Dict[str, Any], Any]:
        """One update (the module docstring's order): the critics' loss and ``step`` (the actor held out), then on an
        actor step the actor's loss from the critics just stepped and its ``step`` (the critics held out), then the
        targets. ``step(loss, hold, last)``: ``last`` on the update's last step (the one that counts it, so both
        steps' loss checks name the same update). Returns the statistics and the steps' non-finite flag
        (``step``'s returns or-ed: the captured update's; None eagerly)."""
        obs, action, next_obs, reward, bootstrap = self._learn_batch(batch)
        q_loss, stats = self._critic_loss(obs, action, next_obs, reward, bootstrap, noise(*action.shape))
        bad = step(q_loss, self._actor_params, not actor_step)
        loss = q_loss.detach()
        if actor_step:
            actor_loss, actor_stats = self._actor_pass(obs, action)
            actor_bad = step(actor_loss, self._critic_params, True)
            bad = None if bad is None else bad | actor_bad
            loss, stats = loss + actor_loss.detach(), {**stats, "actor_loss": actor_loss.detach(), **actor_stats}
        self._update_target(actor_step)
        return {"loss": loss, **self._actor_stats(stats)}, bad

    def _actor_stats(self, stats: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """``stats`` with the actor's of the last actor step where this update had no actor pass (kept, so every
        update reports the same keys). They are kept in tensors of their own, written in place by each actor step:
        a captured graph without an actor step (TD3's critic-only phase, ``policies.update_graph``) reports them
        from that memory, which the actor phase's graph writes at each replay (a reference to the tensors of the
        step before the capture would report a warm-up's values for the rest of the run)."""
        if "actor_loss" in stats:
            actor = {k: v.detach() for k, v in stats.items() if k not in ("q_loss", "q_value", "target_q")}
            if self._last_actor_stats.keys() == actor.keys():
                for key, value in actor.items():
                    self._last_actor_stats[key].copy_(value)
            else:
                self._last_actor_stats = {k: v.clone() for k, v in actor.items()}
        return {**self._last_actor_stats, **stats}

    @property
    def graph_period(self) -> int:
        """Updates after which a captured update's Python side repeats: the actor's delay."""
        return self._actor_every

    def _learn_batch(self, batch: Any) -> tuple:
        """The batch on the learner's device as the losses take it: ``(obs, action in (-1, 1), next_obs, reward,
        bootstrap)``, ``bootstrap`` being ``discount * (1 - terminated)``."""
        dev = self.device
        obs = model_obs(batch.obs, dev, self.normalisation)
        next_obs = model_obs(batch.next_obs, dev, self.normalisation)
        action = ((batch.action.to(dev).float() - self._learn_bias) / self._learn_scale).clamp(-1.0, 1.0)
        reward = batch.reward.to(dev).float()
        return obs, action, next_obs, reward, self._discount(batch) * (~batch.terminated.to(dev)).float()

    @torch.no_grad()
    def _update_target(self, actor_step: bool) -> None:
        if actor_step:
            torch._foreach_lerp_(list(self._target_model.parameters()), list(self.model.parameters()), self._theta)

    def _discount(self, batch: Any) -> torch.Tensor | float:
        """gamma^n of each transition (the collector's n-step returns)."""
        return batch.discount.to(self.device).float()

    def _smoothing_noise(self, rows: int, cols: int) -> torch.Tensor:
        """This rank's rows of the update's smoothing noise (the same numbers on any world size)."""
        if self._policy_noise == 0.0:
            return torch.zeros((rows, cols), device=self.device)
        self._noise_generator.manual_seed((self._noise_seed * 1_000_003 + self.optimizer_step.updates) % 2**63)
        return smoothing_noise(self._noise_generator, rows, cols, self._policy_noise, self._noise_clip, get_rank(),
                               get_world_size())

    def _graph_noise(self, rows: int, cols: int) -> torch.Tensor:
        """A captured update's smoothing noise, from torch's generator on the device (each replay advances it):
        ``_smoothing_noise`` reseeds its own per update, which a graph would replay as one seed."""
        noise = torch.randn((rows, cols), device=self.device) * self._policy_noise
        return noise.clamp_(-self._noise_clip, self._noise_clip)

    @hot_path("learn", name="loss")
    def _critic_loss(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor, reward: torch.Tensor,
                     bootstrap: torch.Tensor, noise: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``(q_loss, detached statistics)``, actions in (-1, 1); ``bootstrap`` is ``discount * (1 - terminated)``."""
        # the TD target: the target actor's action with clipped noise, the smallest target critic
        with torch.no_grad():
            next_action = (self._target_model.actor(next_obs) + noise).clamp(-1.0, 1.0)
            q_next = functools.reduce(torch.minimum, self._target_model.critic(next_obs, next_action))
            target = reward + bootstrap * q_next
        qs, _, _ = self.learn_model(obs, action, actor=False)
        q_loss = sum(F.mse_loss(q, target) for q in qs)
        stats = {"q_loss": q_loss.detach(), "q_value": qs[0].detach().mean(), "target_q": target.mean()}
        return q_loss + zero_for_ddp(self.learn_model, self._actor_params), stats

    @hot_path("learn", name="actor_loss")
    def _actor_pass(self, obs: torch.Tensor, action: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``(actor_loss, its detached statistics)`` through the critics as they are now (after their step)."""
        _, pi, q_pi = self.learn_model(obs, action, critics=False)
        actor_loss, actor_stats = self._actor_loss(q_pi, pi, action)
        return actor_loss + zero_for_ddp(self.learn_model, self._critic_params), actor_stats

    def _actor_loss(self, q_pi: torch.Tensor, pi: torch.Tensor,
                    action: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``-mean(Q1(s, pi(s)))`` and no further statistics."""
        return -q_pi.mean(), {}

    # ---- act -------------------------------------------------------------------------------------
    def _act(self, obs: Obs, mode: str) -> torch.Tensor:
        """``pi(obs)`` in (-1, 1), on ``mode``'s device."""
        obs = model_obs(obs, self.mode_devices[mode], self.normalisation)
        with torch.inference_mode():
            return self._pi[mode](self.placement.actor(mode), obs)

    @hot_path("collect", "eval")
    def _pi(self, model: TD3Model, obs: torch.Tensor) -> torch.Tensor:
        """The acting forward (a hot path: ``policy.compile`` / ``policy.amp``)."""
        return model.actor(obs)

    def _forward_collect(self, obs: Obs, random: bool = False,
                         noise: Optional[float] = None) -> Dict[str, torch.Tensor]:
        """``pi(obs)`` plus Gaussian noise of std ``noise`` (default ``collect.noise_sigma``), clipped to the
        bounds, in env units; uniform over the bounds when ``random`` (the warm-up). Drawn on the collect
        device."""
        device = self.mode_devices["collect"]
        generator = self._generators.on(device)
        if random:
            action = 2 * torch.rand((num_rows(obs), self._action_dim), generator=generator, device=device) - 1
            return {"action": self._to_env(action)}
        action = self._act(obs, "collect")
        sigma = self._explore_sigma if noise is None else float(noise)
        if sigma > 0:
            noise_draw = torch.randn(action.shape, generator=generator, device=device, dtype=action.dtype)
            action = (action + sigma * noise_draw).clamp(-1.0, 1.0)
        return {"action": self._to_env(action)}

    def _forward_eval(self, obs: Obs) -> Dict[str, torch.Tensor]:
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
        learn = self.params.learn
        return [dict(lr=learn.learning_rate_q), dict(lr=learn.learning_rate_policy)]


@POLICY_REGISTRY.register("ddpg")
class DDPGPolicy(TD3Policy):
    """DDPG (``create_config.policy.type='ddpg'``): TD3 with one critic, no policy delay and no target
    smoothing (its defaults; every TD3 key still applies)."""

    algo, label = "ddpg", "DDPG"
    Params = DDPGParams
