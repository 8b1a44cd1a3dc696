"""DQN with the usual improvements: double Q, dueling head, n-step targets, hard or soft target network,
optional prioritized replay with importance weights, and the Rainbow pieces as model options: a
distributional head (categorical C51 or quantile QR-DQN, ``policy.model.distribution``) and noisy layers for
exploration (``policy.model.noisy``). ``policies.rainbow`` registers them all switched on (Hessel et al.).

The algorithm, on one screen (``_loss``; ``_forward_learn`` drives it: batch in, backward, step)::

    q        = Q(obs)[action]
    a*       = argmax_a Q(next_obs)                 (double Q: the online net picks ...)
    target   = reward + discount * (1 - terminated) * Q_target(next_obs)[a*]   (... the target net rates)
    loss     = mean(weight * huber(q - target))

``reward`` and ``discount`` come from the n-step builder: the discounted window sum and gamma^(window
length); ``terminated`` cuts the bootstrap, truncation does not.

With a distributional head the same steps act on distributions (``policies.distributional``): ``a*`` is the
argmax of the online net's expected values (double Q) or the target net's (not double); the target is the
target net's distribution of ``a*`` shifted by ``reward + discount * (1 - terminated) * z``, projected onto the
support (categorical) or taken as samples (quantile); the per-sample loss is the cross-entropy (categorical) or
the quantile Huber loss (quantile), weighted by the importance weights, and it is also the sample's new
priority (Hessel et al.: the KL loss, whose gradient the cross-entropy shares).

Noisy layers (``policies.noisy``) draw new noise at every forward; collection acts greedily on the noisy
network, evaluation on the mean weights. An epsilon schedule next to them is refused (``check_exploration``):
two explorations at once, one of which the network cannot learn to turn down, is rarely what was meant, and
refusing it keeps the config saying what runs.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

import gymnasium as gym
import torch
import torch.nn.functional as F

from data.obs import cat, to_device
from data.replay import PrioritizedReplayParams
from engine.config import ConfigError
from engine.params import Params, param, section
from engine.registry import POLICY_REGISTRY

from .accel import hot_path, warn_once
from .base import Policy, resolve_shape, space_dims
from .defaults import CollectParams, OffPolicyParams, OnlineEvalParams
from .distributional import categorical_projection, quantile_huber_loss, support
from .greedy import ExpectedQ, GreedyActor
from .normalisation import model_obs
from .masks import action_mask, masked_argmax, observation_has_mask
from .models import Q_DISTRIBUTIONS, QNetwork
from .noisy import noise_off
from .optim import OptimizerStep
from .epsilon import EpsilonDraws, EpsilonParams
from .placement import DeviceGenerators
from .spaces import model_observation

__all__ = ["DQNPolicy", "DQNParams", "QModelParams", "QLearnParams", "EpsilonParams", "EpsilonDraws", "check_q_head",
           "check_exploration"]


@dataclass
class QModelParams(Params):
    """``policy.model`` of a Q-learning policy: the Q network (``policies.models.QNetwork``)."""

    obs_shape: Optional[Any] = param(None)
    """The observation's shape; None: taken from the env's observation space (and recorded in the run's config)."""
    action_shape: Optional[Any] = param(None)
    """The number of actions; None: taken from the env's action space."""
    encoder_hidden_size_list: List[int] = param([128, 128, 64])
    """The widths of the MLP encoder's layers (image observations: the CNN's features, then these)."""
    dueling: bool = param(True)
    """A dueling head: Q = V + A - mean(A), which learns the state's value apart from each action's advantage."""
    encoders: Dict[str, Any] = param({})
    """Dict/Tuple observations: how each key is encoded, by its key path as nested mappings
    (``policies.encoders.EncoderParams``: ``encoders.image.type=cnn``); a key not named is encoded by its space."""


@dataclass
class DQNModelParams(QModelParams):
    """``policy.model`` of DQN: the Q network and the Rainbow pieces it can switch on."""

    distribution: str = param("none", choices=Q_DISTRIBUTIONS)
    """"none": one value per action; "categorical": C51's distribution over a fixed support; "quantile":
    QR-DQN's quantiles."""
    n_atoms: int = param(51)
    """The atoms (categorical) or quantiles (quantile) per action; at least 2 (``check_q_head``)."""
    v_min: float = param(-10.0)
    """The lower end of the categorical support (quantile: unused); the support must cover the returns."""
    v_max: float = param(10.0)
    """The upper end of the categorical support."""
    noisy: bool = param(False)
    """Noisy linear layers explore instead of epsilon (then ``other.eps`` must be 0: ``check_exploration``)."""
    noise_sigma0: float = param(0.5, rule="positive")
    """The noisy layers' initial noise scale (Fortunato et al.'s 0.5)."""


@dataclass
class QLearnParams(Params):
    """``policy.learn`` of a Q-learning policy, online or offline: the update and the target network."""

    batch_size: int = param(64, rule="at_least_one")
    """Transitions per update."""
    learning_rate: float = param(1e-3, rule="positive")
    """Adam's learning rate."""
    target_update_freq: int = param(100, rule="at_least_one")
    """Hard update of the target network every N learner updates (when ``target_theta`` is 0)."""
    target_theta: float = param(0.0, rule="unit_interval")
    """> 0: a soft (Polyak) update of the target network with this rate after every update instead."""
    double_q: bool = param(True)
    """Double Q: the online network picks the next action, the target network rates it (less overestimation)."""
    td_loss: str = param("huber", choices=("huber", "mse"))
    """The loss of the TD error for a scalar head: "huber" or "mse" (a distributional head has its own)."""
    grad_clip_norm: float = param(0.0, rule="not_negative")
    """> 0: clip the gradient's norm to this."""
    weight_decay: float = param(0.0, rule="not_negative")
    """Adam's weight decay."""


@dataclass
class DQNLearnParams(QLearnParams):
    """``policy.learn`` of DQN."""

    update_per_collect: int = param(3, rule="at_least_one")
    """Learner updates after each collection of ``collect.n_sample`` transitions."""
    ignore_done: bool = param(False)
    """Treat termination as truncation: bootstrap anyway (for envs whose time limit ends episodes as a
    termination)."""
    quantile_kappa: float = param(1.0, rule="not_negative")
    """The quantile Huber loss's threshold (distribution "quantile"; 0: the plain quantile loss)."""


@dataclass
class DQNOtherParams(Params):
    """``policy.other`` of DQN: exploration and the replay buffer."""

    eps: EpsilonParams = section(EpsilonParams)
    """The epsilon-greedy schedule."""
    replay_buffer: PrioritizedReplayParams = section(PrioritizedReplayParams)
    """The replay buffer (``data.replay.PrioritizedReplayParams``)."""


@dataclass
class DQNParams(OffPolicyParams):
    """DQN's ``policy`` section."""

    priority: bool = param(False)
    """Prioritized replay: sample transitions by their TD error (a sum tree)."""
    priority_IS_weight: bool = param(False)
    """Weight the loss by importance weights, correcting the bias of prioritized sampling."""
    random_collect_size: int = param(0, rule="not_negative")
    model: DQNModelParams = section(DQNModelParams)
    """The Q network."""
    learn: DQNLearnParams = section(DQNLearnParams)
    """The update."""
    collect: CollectParams = section(CollectParams, n_sample=96)
    """Collection."""
    eval: OnlineEvalParams = section(OnlineEvalParams)
    """Evaluation."""
    other: DQNOtherParams = section(DQNOtherParams)
    """Exploration and replay."""


class QValuePolicy(Policy):
    """What a discrete Q-learning policy shares, online (DQN) or offline (CQL): an online and a target
    Q network, greedy acting, the target update, and the learn state. A subclass builds ``_model``,
    ``_target_model``, ``optimizer_step``, ``_grad_clip``, ``_target_update_freq``, ``_target_theta``,
    ``_action_dim`` and ``_eps_draws`` (``EpsilonDraws``) and writes its own update."""

    eager_acting = "through an MLP's lean forward on the CPU (faster than the module at a few rows)"
    action_spaces = ("discrete",)

    def _step(self, loss: torch.Tensor) -> None:
        """After the loss: its check, backward, gradient clipping (``grad_clip_norm`` > 0), the optimizer step,
        the update count and the target network's update."""
        self.optimizer_step.step(loss, self._grad_clip)
        self._update_target()

    def _graph_target_update(self, count: torch.Tensor) -> None:
        """``_update_target`` inside a captured update (``policies.update_graph``), for the ``count``-th update (a
        device tensor): the hard copy as a lerp whose weight is ``count % target_update_freq == 0``, exact at 0
        and at 1, so every replay decides on the device."""
        with torch.no_grad():
            if self._target_theta > 0:
                torch._foreach_lerp_(list(self._target_model.parameters()), list(self.model.parameters()),
                                     self._target_theta)
                return
            due = count % self._target_update_freq == 0
            pairs = list(zip(self._target_model.state_dict().values(), self.model.state_dict().values()))
            floats = [(t, o) for t, o in pairs if t.is_floating_point()]
            if floats:  # the weights as tensors of the targets' shapes: a 0-d tensor weight is read on the host
                weight = due.float()
                torch._foreach_lerp_([t for t, _ in floats], [o for _, o in floats],
                                     [weight.expand_as(t) for t, _ in floats])
            for t, o in pairs:
                if not t.is_floating_point():
                    t.copy_(torch.where(due, o, t))

    def _update_target(self) -> None:
        if self._target_theta > 0:
            with torch.no_grad():
                torch._foreach_lerp_(list(self._target_model.parameters()), list(self.model.parameters()),
                                     self._target_theta)
        elif self.optimizer_step.updates % self._target_update_freq == 0:
            self._target_model.load_state_dict(self.model.state_dict())

    # ---- act -------------------------------------------------------------------------------------
    def _greedy(self, obs: torch.Tensor, mode: str) -> torch.Tensor:
        """``argmax_a Q(obs, a)`` on ``mode``'s device: an MLP on the CPU through its lean forward
        (``QNetwork.host_greedy_action``, ``eager_acting``), anything else through the hot path."""
        model = self.placement.actor(mode)
        device = self.mode_devices[mode]
        obs = to_device(obs, device)  # nothing to do where the envs are on the mode's device
        if device.type == "cpu" and model.host_acting:
            return model.host_greedy_action(obs if obs.dtype == torch.float32 else obs.float())
        # evaluation acts on the noisy layers' mean weights; collection on a new noise draw per step
        with torch.inference_mode(), (noise_off(model) if mode == "eval" else contextlib.nullcontext()):
            return self._greedy_action[mode](model, model_obs(obs, device, self.normalisation, image=model.is_image))

    @hot_path("collect", "eval", name="greedy")
    def _greedy_action(self, model: torch.nn.Module, obs: Any) -> torch.Tensor:
        """The acting hot path: ``argmax_a Q(obs, a)`` (a distributional head's expected values), over the legal
        actions where the observation carries a mask (``policies.masks``)."""
        return masked_argmax(model.expectation(model(obs)), action_mask(obs))

    def _forward_collect(self, obs: Any, eps: float = 0.0, random: bool = False) -> Dict[str, Any]:
        """Epsilon-greedy: each env acts at random with probability ``eps`` (always when ``random``, as during
        ``random_collect_size``), among the legal actions where the observation carries a mask. With noisy layers
        the greedy action is the noisy network's (and ``eps`` is 0: ``check_exploration``)."""
        greedy = self._greedy(obs, "collect")
        eps = 1.0 if random else eps
        mask = action_mask(obs) if eps > 0 else None  # read and moved only where some env may explore
        return {"action": self._explore(greedy, eps, None if mask is None else to_device(mask, greedy.device))}

    def _forward_eval(self, obs: torch.Tensor) -> Dict[str, Any]:
        return {"action": self._greedy(obs, "eval")}

    def greedy_module(self) -> torch.nn.Module:
        """``argmax_a Q(obs, a)`` of the expected values, noise off, as eval acts (``Policy.greedy_module``)."""
        return GreedyActor(ExpectedQ(self.model), discrete=True, image=self.model.is_image)

    def _explore(self, action: torch.Tensor, eps: float, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``action`` with each row replaced by a uniformly random (legal, with a ``mask``) action with
        probability ``eps`` (``EpsilonDraws``: drawn on the action's device, nothing read back to the host)."""
        return self._eps_draws.apply(action, eps, mask)

    # ---- state -----------------------------------------------------------------------------------
    _checkpointed = (("model", "model"), ("target_model", "_target_model"))

    def optimizer_settings(self) -> List[Dict[str, float]]:
        """The config's settings of the one parameter group (``policies.optim``)."""
        learn = self.params.learn
        return [dict(lr=learn.learning_rate, weight_decay=learn.weight_decay)]


@POLICY_REGISTRY.register("dqn")
class DQNPolicy(QValuePolicy):
    """Deep Q-learning for discrete actions (``create_config.policy.type='dqn'``)."""

    pipeline = "off_policy"
    default_env_steps = 500_000
    graph_masks_rows = True  # its captured update leaves out (weight 0) rows a frame-stack storage cannot rebuild
    Params = DQNParams
    params: DQNParams

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        obs_shape, _, _ = space_dims(observation_space, action_space, self._name, continuous=False, images=True,
                                     structured=True)
        model, learn = self.params.model, self.params.learn
        check_q_head(model, learn)
        check_exploration(model, self.params.other.eps)
        obs_shape = model_observation(cfg["model"], observation_space, obs_shape, self._name)
        observation_has_mask(observation_space, action_space, self._name)  # a mask that cannot be used: named here
        action_shape = resolve_shape(cfg["model"], "action_shape", int(action_space.n), self._name,
                                     f"action space {action_space}")
        action_dim = int(action_shape if not isinstance(action_shape, list) else action_shape[0])
        self._distribution = model.distribution
        self._v_min, self._v_max = float(model.v_min), float(model.v_max)
        self.model = self.placement.build(lambda: QNetwork(
            obs_shape, action_dim, model.encoder_hidden_size_list, model.dueling, distribution=model.distribution,
            n_atoms=model.n_atoms, v_min=self._v_min, v_max=self._v_max, noisy=model.noisy,
            sigma0=float(model.noise_sigma0), encoders=model.encoders))
        self._target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.optimizer_step = OptimizerStep.adam([self.model.parameters()], self.optimizer_settings(), self._name)
        self._target_update_freq = learn.target_update_freq
        self._target_theta = float(learn.target_theta)
        self._double_q = learn.double_q
        self._ignore_done = learn.ignore_done
        self._use_weight = self.params.priority and self.params.priority_IS_weight
        self._grad_clip = float(learn.grad_clip_norm)
        self._td_loss = F.smooth_l1_loss if learn.td_loss == "huber" else F.mse_loss
        self._kappa = float(learn.quantile_kappa)
        self._action_dim = action_dim
        # its exploration draws come from torch's RNG, so torch.manual_seed still makes collection reproducible
        self._eps_draws = EpsilonDraws(DeviceGenerators(), action_dim)

    @property
    def _name(self) -> str:
        """The registered name errors call the algorithm by."""
        return "dqn"

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """At compile time, before any env starts: the Q head and the exploration (``check_q_head``,
        ``check_exploration``); the policy checks them again when it is built from a config of its own."""
        super().check_config(cfg)
        params = cls.Params.of(cfg["policy"], "policy")
        check_q_head(params.model, params.learn)
        check_exploration(params.model, params.other.eps)

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        loss, q, target, priority = self._batch_loss(batch)
        self._step(loss)
        return {"loss": loss.detach(), "q_value": q.mean(), "target_q": target.mean(), "priority": priority}

    def _graph_update(self, batch: Any, count: torch.Tensor, number: int) -> tuple:
        """``_forward_learn`` with nothing read on the host, as the ``count``-th update (``policies.update_graph``:
        ``policy.compile='cudagraph_update'``): ``(statistics, priority, non-finite flag)``."""
        # rows a frame-stack storage could not rebuild get weight 0 (``GraphedUpdates._redrawn``)
        loss, q, target, priority = self._batch_loss(batch, batch.valid if "valid" in batch.keys() else None)
        bad = self.optimizer_step.graph_step(loss, self._grad_clip)
        self._graph_target_update(count)
        return {"loss": loss.detach(), "q_value": q.mean(), "target_q": target.mean()}, priority, bad

    def _batch_loss(self, batch: Any, valid: Optional[torch.Tensor] = None) -> tuple:
        """The batch on the learner's device as the loss takes it, and ``_loss`` of it: the rows weighed by
        ``batch.weight`` with importance weights, and by ``valid`` (0 or 1) where given."""
        obs, next_obs = (model_obs(o.to(self.device, non_blocking=True), self.device, self.normalisation,
                                   image=self.model.is_image) for o in (batch.obs, batch.next_obs))
        action = batch.action.to(self.device).long()
        reward = batch.reward.to(self.device).float()
        discount = batch.discount.to(self.device).float()
        not_done = (~batch.terminated.to(self.device)).float() if not self._ignore_done else torch.ones_like(reward)
        weight = batch.weight.to(self.device).float() if self._use_weight else None
        if valid is not None:
            weight = valid.float() if weight is None else weight * valid
        return self._loss(obs, next_obs, action, reward, discount, not_done, weight)

    @hot_path("learn")
    def _loss(self, obs: Any, next_obs: Any, action: torch.Tensor, reward: torch.Tensor,
              discount: torch.Tensor, not_done: torch.Tensor, weight: Optional[torch.Tensor]) -> tuple:
        """The learner's hot path (compiled with ``policy.compile``): ``(loss, q, target, priority)``, all but
        the loss detached; q and target are expected values of the taken action (the distributions' means).
        Where the observations carry a legal-action mask, the next action is the best legal one."""
        n = action.shape[0]
        rows = torch.arange(n, device=action.device)
        # one forward of the online net over obs and next_obs: fewer kernel launches, one DDP forward (and with
        # noisy layers one noise draw, shared by both halves)
        out_both = self.learn_model(cat([obs, next_obs]))
        out, out_next_online = out_both[:n], out_both[n:].detach()
        taken = out[rows, action]                       # [B] values, or [B, n_atoms] log-probs / quantiles
        with torch.no_grad():
            out_next_target = self._target_model(next_obs)
            # double Q: the online net picks a*, the target net rates it (by expected value for distributions)
            pick = out_next_online if self._double_q else out_next_target
            next_action = masked_argmax(self.model.expectation(pick), action_mask(next_obs))
            next_taken = out_next_target[rows, next_action]
            bootstrap = discount * not_done

        if self._distribution == "categorical":
            with torch.no_grad():
                target_probs = categorical_projection(next_taken.exp(), reward, bootstrap, self._v_min, self._v_max)
                z = support(self._v_min, self._v_max, target_probs.shape[-1], target_probs.device)
                target = (target_probs * z).sum(-1)
            elementwise = -(target_probs * taken).sum(-1)  # cross-entropy of the projected target
            q = (taken.detach().exp() * z).sum(-1)
            priority = elementwise.detach()
        elif self._distribution == "quantile":
            with torch.no_grad():
                target_quantiles = reward.unsqueeze(-1) + bootstrap.unsqueeze(-1) * next_taken
                target = target_quantiles.mean(-1)
            elementwise = quantile_huber_loss(taken, target_quantiles, self._kappa)
            q = taken.detach().mean(-1)
            priority = elementwise.detach()
        else:
            with torch.no_grad():
                target = reward + bootstrap * next_taken
            elementwise = self._td_loss(taken, target, reduction="none")
            q = taken.detach()
            priority = (q - target).abs()
        if weight is not None:
            elementwise = elementwise * weight
        return elementwise.mean(), q, target, priority


def check_q_head(model: DQNModelParams, learn: DQNLearnParams) -> None:
    """Refuse a Q head the config cannot mean, naming the key and the fix (what no single key's rule sees).

    Raises:
        ConfigError: fewer than 2 atoms; ``v_min >= v_max`` (categorical); ``td_loss='mse'`` with a
            distributional head (its loss is the cross-entropy or the quantile Huber loss, so the setting would
            be silently ignored).
    """
    distribution = model.distribution
    if distribution == "none":
        return
    if model.n_atoms < 2:
        raise ConfigError(f"policy.model.n_atoms={model.n_atoms}: a {distribution} head needs at least 2 atoms to "
                          f"describe a distribution (51 is C51's and Rainbow's; QR-DQN uses 200); for one value per "
                          f"action set policy.model.distribution='none'")
    if distribution == "categorical" and not model.v_min < model.v_max:
        raise ConfigError(f"policy.model.v_min={model.v_min} must be below policy.model.v_max={model.v_max}: "
                          f"they are the ends of the categorical head's support, which must cover the returns "
                          f"(e.g. -10 and 10 for clipped Atari rewards)")
    if learn.td_loss == "mse":
        raise ConfigError(f"policy.learn.td_loss='mse' applies to a scalar Q head; a {distribution} head learns "
                          f"with {'the cross-entropy' if distribution == 'categorical' else 'the quantile Huber loss'}"
                          f": drop td_loss (or set it to 'huber'), or set policy.model.distribution='none'")


def check_exploration(model: DQNModelParams, eps: EpsilonParams) -> None:
    """Noisy layers explore on their own: refuse an epsilon-greedy schedule next to them.

    Why refuse rather than pick a winner: both at once would add random actions the network cannot learn
    to reduce, and silently dropping either would run something else than the config says. Rainbow's
    defaults (``policies.rainbow``) set the schedule to zero. Without noisy layers and with a zero schedule
    nothing explores but ``random_collect_size``: allowed, with a warning.

    Raises:
        ConfigError: ``model.noisy`` with ``other.eps.start`` or ``other.eps.end`` above 0.
    """
    start, end = eps.start, eps.end
    if model.noisy and (start > 0 or end > 0):
        raise ConfigError(f"policy.model.noisy=True explores through its noisy layers, and an epsilon-greedy schedule "
                          f"on top (policy.other.eps start={start}, end={end}) is refused: set policy.other.eps.start=0 "
                          f"and policy.other.eps.end=0 (the rainbow algo's defaults), or policy.model.noisy=False "
                          f"to explore by epsilon alone")
    if not model.noisy and start == 0 and end == 0:
        warn_once("policy.other.eps is 0 throughout and policy.model.noisy is off: nothing explores but the random "
                  "actions of policy.random_collect_size")
