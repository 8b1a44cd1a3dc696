"""PPO (clipped surrogate) and A2C, for discrete (categorical) and continuous (Gaussian) actions.

One ``learn_mode.forward(minibatch)`` is one gradient step; the on-policy learner middleware runs the
epochs and minibatches over what was just collected. The PPO loss, on one screen (``_loss``)::

    ratio   = exp(log pi(a|s) - logp_old)
    adv     = (adv - mean) / (std + 1e-8)                          (optional: learn.adv_norm)
    pg      = -mean(min(ratio * adv, clip(ratio, 1 - eps, 1 + eps) * adv))
    value   = 0.5 * mean((V(s) - returns)^2)                         (or the clipped variant: learn.value_clip)
    loss    = pg + value_weight * value - entropy_weight * entropy

A2C is the same with ``pg = -mean(log pi(a|s) * adv)`` and, by its config, one pass over the whole batch.

Dict and Tuple observations (trees, ``data.obs``) go through one ``policies.encoders.MultiInputEncoder`` torso
shared by actor and critic (``policy.model.encoders``: per-key settings). A legal-action mask under the
observation's ``action_mask`` key (discrete actions only; ``data.action_masks``, ``policies.masks``) makes every
distribution the masked one, as sb3-contrib's ``MaskablePPO``: acting samples among the legal actions, the eval
mode and ``greedy_module`` take the most likely legal one, and the loss's log-probs and entropy are those of the
stored observation's mask (it rides in the observation, so a rollout keeps the mask each action was drawn under).
Continuous actions: the env gets the sample clipped to its bounds (``action``); the unclipped sample is kept
as ``raw_action`` and the log-probs are taken on it, so they stay exact.

``policy.reward_norm`` (reward scaling, as SB3's ``VecNormalize(norm_reward=True)`` and CleanRL's MuJoCo PPO
with gymnasium's ``NormalizeReward``): the GAE stage calls ``scale_rewards`` on each rollout, which divides the
rewards by the running standard deviation of each env's discounted return and clips them to
``[-reward_norm_clip, reward_norm_clip]``; advantages and value targets are computed from the scaled rewards,
so the critic learns returns of order 1 whatever the env pays. The statistics are the observation
normaliser's kind (``policies.obs_norm``): updated from collected rollouts, merged across DDP ranks once per
iteration, checkpointed under ``reward_norm``. The logged episode returns stay the env's.

``policy.value_norm`` (MAPPO's ValueNorm): the critic's output is read in the units of the value targets'
running mean and deviation. Collection and GAE denormalise it, the loss normalises the targets (and the stored
values of ``value_clip``); each rollout's targets join the statistics, merged after the learner as the others.

``policy.learn.lr_schedule``: 'constant', 'adaptive' or 'linear' (``policies.lr_schedules``: how, and why).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Union

import gymnasium as gym
import torch
from torch.distributions import Categorical, Normal

from engine.distributed import allreduce_data, is_distributed
from engine.params import Params, param, section
from engine.registry import POLICY_REGISTRY

from data.obs import Obs, first_leaf

from .accel import hot_path
from .advantages import mean_shares, normalise_advantages, weighted_mean
from .base import Policy, resolve_shape, space_dims
from .defaults import CollectParams, OnlineEvalParams, PolicyParams, warn_unread_other
from .greedy import ActorOut, GreedyActor
from .lr_schedules import LR_SCHEDULES, adaptive_lr, linear_lr
from .masks import action_mask, masked_argmax, masked_logits, observation_has_mask
from .models import ActorCritic
from .spaces import model_observation
from .normalisation import model_obs
from .obs_norm import RunningObsNorm
from .optim import OptimizerStep
from .placement import PerDevice

__all__ = ["PPOPolicy", "PPOParams", "PPOModelParams", "PPOLearnParams", "PPOCollectParams",
           "normalise_advantages"]  # normalise_advantages: policies.advantages', kept importable here


@dataclass
class PPOModelParams(Params):
    """PPO's ``model`` section: the actor-critic (``policies.models.ActorCritic``)."""

    obs_shape: Optional[Union[int, List[int]]] = param(None)
    """The observation's shape: its size for vectors, ``[C, H, W]`` for image stacks (a Nature CNN torso shared by
    actor and critic). None: taken from the env at construction; a value given is checked against the env. A Dict
    or Tuple observation has no one shape: leave it None (its keys are set under ``encoders``)."""
    action_shape: Optional[Union[int, List[int]]] = param(None)
    """The number of actions (discrete), or the action vector's size (continuous); None: as ``obs_shape``."""
    actor_head_hidden_size_list: List[int] = param([64, 64])
    """The actor MLP's layer widths before its output layer (tanh; ReLU on image features; ``ppo_lstm``: after
    the recurrent layer); []: a linear output layer."""
    critic_head_hidden_size_list: List[int] = param([64, 64])
    """Likewise for the critic, a network of its own (only an image torso is shared)."""
    init_log_std: float = param(0.0)
    """Continuous actions: the Gaussian's initial log standard deviation (learned, one per action dimension)."""
    encoders: Dict[str, Any] = param({})
    """Dict or Tuple observations: the encoder settings per key (``policies.encoders.EncoderParams``, nested
    mappings by key path, e.g. ``{"image": {"type": "cnn"}}``); keys not named get "auto". The keys' encoders form
    one torso shared by actor and critic (``ppo_lstm``: each core's, before its ``encoder_hidden_size_list``).
    Unused by Box observations."""


@dataclass
class PPOLearnParams(Params):
    """PPO's ``learn`` section: the epochs over each collect and the loss (module docstring)."""

    epoch_per_collect: int = param(10, rule="at_least_one")
    """Passes over each collect's transitions, each in freshly shuffled minibatches of ``batch_size``."""
    batch_size: int = param(64, rule="at_least_one")
    """Transitions per minibatch: one ``learn_mode.forward``, one gradient step (``ppo_lstm``: ``batch_size /
    seq_len`` whole sequences)."""
    learning_rate: float = param(3e-4, rule="positive")
    """Adam's learning rate (eps 1e-5); with ``lr_schedule='adaptive'``, the rate it starts from."""
    clip_ratio: float = param(0.2)
    """eps of the clipped surrogate: the probability ratio is clipped to [1 - eps, 1 + eps]; also the range of
    ``value_clip``. A2C's policy gradient does not clip."""
    value_weight: float = param(0.5)
    """Weight of the value loss (half the squared error to the returns) in the total loss."""
    entropy_weight: float = param(0.0)
    """Weight of the entropy bonus taken off the loss; above 0 it keeps the policy from collapsing early."""
    adv_norm: bool = param(True)
    """Normalise each minibatch's advantages; under DDP with the mean and standard deviation of all ranks'
    minibatches (one small all-reduce), so data-parallel PPO is single-process PPO on the joined batch."""
    value_clip: bool = param(False)
    """Clip the value update around the collected value (PPO2's variant); the range is ``clip_ratio`` in
    return units: for returns of order 1 only (e.g. with ``reward_norm``)."""
    grad_clip_value: float = param(0.5)
    """The largest gradient norm an update applies (all parameters together); 0 disables clipping."""
    lr_schedule: str = param("constant", choices=LR_SCHEDULES)
    """"constant"; "adaptive": steer the rate by each epoch's mean approximate KL (module docstring: how, and
    how it failed on Pong); "linear": from ``learning_rate`` down to 0 at ``lr_anneal_env_steps``, else at the run's
    ``--max-env-step`` (SB3's ``lin_`` schedules, CleanRL's ``anneal_lr``), set each iteration from the env steps done,
    so a resume or a DDP rank needs no state of its own (``pipelines.stages.lr_annealing``; refused without either)."""
    lr_anneal_env_steps: Optional[int] = param(None, rule="at_least_one")
    """``lr_schedule='linear'``: the env steps it falls to 0 over (then stays), in place of ``--max-env-step``."""
    kl_threshold: float = param(0.008, rule="positive")
    """``lr_schedule='adaptive'``: the mean approximate KL per epoch aimed at (rl_games' default; its configs use
    0.008 to 0.016)."""


@dataclass
class PPOCollectParams(CollectParams):
    """PPO's ``collect`` section: the rollout of each iteration and its advantages."""

    n_sample: int = param(2048, rule="at_least_one")
    """Transitions per collect, over all collector envs: ``ceil(n_sample / env.collector_env_num)`` steps of each
    env, learned from and then dropped."""
    gae_lambda: float = param(0.95, rule="unit_interval")
    """GAE's lambda: 0 is the one-step TD error (low variance, biased by the critic), 1 the discounted rewards up
    to the rollout's end, bootstrapped there, less the value (high variance)."""


@dataclass
class PPOParams(PolicyParams):
    """PPO's ``policy`` section (``PPOPolicy``; A2C and PPO-LSTM change some of its defaults)."""

    discount_factor: float = param(0.99, rule="unit_interval")
    """gamma: the discount of future rewards in the advantages and value targets (GAE), and in the running
    return that ``reward_norm`` scales by."""
    model: PPOModelParams = section(PPOModelParams)
    """The actor-critic."""
    learn: PPOLearnParams = section(PPOLearnParams)
    """The updates on each collect."""
    collect: PPOCollectParams = section(PPOCollectParams)
    """The rollout each iteration learns from."""
    reward_norm: bool = param(False)
    """Scale rewards by the running standard deviation of each env's discounted return (SB3's
    ``VecNormalize(norm_reward=True)``; module docstring), so that the critic learns returns of order 1."""
    reward_norm_clip: float = param(10.0)
    """``reward_norm``: scaled rewards are clipped to [-clip, clip]."""
    value_norm: bool = param(False)
    """The critic learns value targets normalised by their running mean and deviation (MAPPO's ValueNorm, Yu
    et al. 2022; module docstring): returns of any scale become targets of order 1, the rewards untouched."""
    eval: OnlineEvalParams = section(OnlineEvalParams)
    """How often the policy is evaluated, and when a run stops for want of progress."""
    other: Dict[str, Any] = param({})
    """Free-form and unread (DI-engine configs keep a replay and exploration here): such configs load, warned."""


@POLICY_REGISTRY.register("ppo")
class PPOPolicy(Policy):
    """Proximal Policy Optimization (``create_config.policy.type='ppo'``)."""

    pipeline = "on_policy"
    action_spaces = ("discrete", "continuous")
    algo = "PPO"
    supports_obs_norm = True
    Params = PPOParams
    params: PPOParams

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        params = self.params
        warn_unread_other(params.other, self.algo)
        model_obs, action_dim = self._model_input(cfg["model"], observation_space, action_space)
        self.model = self.placement.build(lambda: self._make_model(model_obs, action_dim))
        learn = params.learn
        self.optimizer_step = OptimizerStep.adam([self.model.parameters()], self.optimizer_settings(), self.algo,
                                                 eps=1e-5)
        self._clip = float(learn.clip_ratio)
        self._value_weight = float(learn.value_weight)
        self._entropy_weight = float(learn.entropy_weight)
        self._adv_norm = learn.adv_norm
        self._value_clip = learn.value_clip
        self._grad_clip = float(learn.grad_clip_value)
        self._adaptive_lr = learn.lr_schedule == "adaptive"
        self._linear_lr = learn.lr_schedule == "linear"
        self._base_lr = float(learn.learning_rate)
        self._kl_threshold = float(learn.kl_threshold)
        self._epoch_kls: List[torch.Tensor] = []  # adaptive: this epoch's approx_kl, left on the device
        if self.continuous:
            self._low, self._high = action_space.low, action_space.high
            self._bounds = PerDevice.copies(*(torch.as_tensor(b, dtype=torch.float32)
                                              for b in (self._low, self._high)))
        self._gamma = float(params.discount_factor)
        if params.reward_norm:
            self.normalisation.reward_norm = RunningObsNorm((), params.reward_norm_clip,
                                                            name="policy.reward_norm_clip").to(self.device)
        if params.value_norm:
            # the variance floored at 1e-2 (MAPPO's ValueNorm): targets that barely vary early on must not blow
            # the critic's normalised errors up
            self.normalisation.value_norm = RunningObsNorm((), 1e6, name="policy.value_norm",
                                                           var_floor=1e-2).to(self.device)

    def _model_input(self, model_cfg: Any, observation_space: gym.Space, action_space: gym.Space) -> tuple:
        """``(what the model is built for, action_dim)``: a Box observation's shape or a Dict/Tuple space, with
        ``continuous``, ``_structured``, ``_image`` and ``_masked`` set and ``policy.model``'s shapes filled or
        checked (``policies.mappo``: the agents' spaces)."""
        obs_shape, action_dim, self.continuous = space_dims(observation_space, action_space,
                                                            self.params.type or "ppo", images=True, structured=True)
        self._structured = obs_shape is None  # Dict/Tuple observations: trees, encoded key by key
        self._image = not self._structured and len(obs_shape) == 3
        self._masked = observation_has_mask(observation_space, action_space, self.algo)
        model_observation(model_cfg, observation_space, obs_shape, self.algo)
        resolve_shape(model_cfg, "action_shape", action_dim, self.algo, f"action space {action_space}")
        return (observation_space if self._structured else obs_shape), action_dim

    def _make_model(self, obs: Union[tuple, gym.Space], action_dim: int) -> torch.nn.Module:
        """The actor-critic of ``policy.model`` (a recurrent one for ``ppo_lstm``) for ``obs``: a Box
        observation's shape, or a Dict/Tuple observation space (``policy.model.encoders``)."""
        model = self.params.model
        return ActorCritic(obs, action_dim, model.actor_head_hidden_size_list, model.critic_head_hidden_size_list,
                           self.continuous, model.init_log_std, encoders=model.encoders)

    def _mask(self, obs: Obs) -> Optional[torch.Tensor]:
        """The ``[B, A]`` legal-action mask of observations already on their device (``[B, L, A]`` for a recurrent
        policy's sequences), or None where the observations carry none. Read outside the hot paths, so that a
        compiled one takes a tensor and never looks up a tree's key."""
        return action_mask(obs) if self._masked else None

    # ---- distributions ---------------------------------------------------------------------------
    def _dist(self, head: Any, mask: Optional[torch.Tensor] = None) -> torch.distributions.Distribution:
        """The action distribution of a head, without argument validation: it reads a check's result back to the
        host at each construction and each ``log_prob`` (a wait for a GPU per vector step and per update;
        tests/middleware/test_device_collector.py counts them). With a legal-action ``mask`` (discrete only) the
        illegal actions get probability 0 (``policies.masks.masked_logits``): samples, log-probs and the entropy
        are those of the legal actions, in acting and in the loss alike (sb3-contrib's ``MaskablePPO``)."""
        if self.continuous:
            mean, log_std = head
            return Normal(mean, log_std.exp(), validate_args=False)
        return Categorical(logits=masked_logits(head, mask), validate_args=False)

    def _log_prob(self, dist: torch.distributions.Distribution, action: torch.Tensor) -> torch.Tensor:
        logp = dist.log_prob(action)
        return logp.sum(-1) if self.continuous else logp

    def _entropy(self, dist: torch.distributions.Distribution) -> torch.Tensor:
        ent = dist.entropy()
        return ent.sum(-1) if self.continuous else ent

    # ---- learn -----------------------------------------------------------------------------------
    def _policy_loss(self, logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor,
                     shares: Optional[torch.Tensor] = None) -> tuple:
        ratio = (logp - logp_old).exp()
        surrogate = torch.min(ratio * adv, ratio.clamp(1 - self._clip, 1 + self._clip) * adv)
        with torch.no_grad():
            stats = {"approx_kl": weighted_mean((ratio - 1) - (logp - logp_old), shares),
                     "clipfrac": weighted_mean(((ratio - 1).abs() > self._clip).float(), shares)}
        return -weighted_mean(surrogate, shares), stats

    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        dev, rows = self.device, self._rows
        inputs = self._learn_inputs(batch)
        action = rows(batch.raw_action.to(dev).float() if self.continuous else batch.action.to(dev).long())
        adv = rows(batch.adv.to(dev).float())
        weight = self._loss_weight(inputs)  # the elements that count (several agents per row: those that acted)
        if self._adv_norm and len(adv) > 1:
            adv = normalise_advantages(adv, weight)
        norm_value = self.normalisation.norm_value  # the critic's units (policy.value_norm), else as they are
        returns = norm_value(rows(batch.returns.to(dev).float()))
        logp_old = rows(batch.logp.to(dev).float())
        value_old = norm_value(rows(batch.value.to(dev).float())) if self._value_clip else None
        mask = self._mask(inputs[0])  # the stored observations' masks: the distribution they were acted from
        mask = None if mask is None else rows(mask)

        loss, stats = self._loss(inputs, action, adv, returns, logp_old, value_old, mask, mean_shares(weight))
        self.optimizer_step.step(loss, self._grad_clip)
        if self._adaptive_lr and "approx_kl" in stats:
            self._epoch_kls.append(stats["approx_kl"])
        if self._adaptive_lr or self._linear_lr:
            stats["learning_rate"] = self.optimizer_step.optimizer.param_groups[0]["lr"]
        return {"loss": loss.detach(), **stats}

    def end_epoch(self) -> None:
        """The learner finished one epoch over a collect: ``lr_schedule='adaptive'`` steers the learning rate by
        the epoch's mean approximate KL (module docstring); nothing otherwise."""
        if not self._adaptive_lr or not self._epoch_kls:
            return
        kl = torch.stack([k.reshape(()).double() for k in self._epoch_kls]).mean()
        self._epoch_kls = []
        kl = float(allreduce_data(kl, op="mean")) if is_distributed() else float(kl)
        for group in self.optimizer_step.optimizer.param_groups:
            group["lr"] = adaptive_lr(float(group["lr"]), kl, self._kl_threshold)

    @property
    def anneals_learning_rate(self) -> bool:
        """Whether ``policy.learn.lr_schedule`` is 'linear': the pipeline then calls ``anneal_learning_rate``."""
        return self._linear_lr

    def anneal_learning_rate(self, fraction: float) -> None:
        """``lr_schedule='linear'``: the rate at ``fraction`` of the schedule's span done, ``learning_rate * (1 -
        fraction)`` (0 from the end of the span on)."""
        rate = linear_lr(self._base_lr, fraction)
        for group in self.optimizer_step.optimizer.param_groups:
            group["lr"] = rate

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """``Policy.load_state_dict``; an adaptive schedule keeps the rate it had reached (the optimizer's), where
        a constant one takes the config's."""
        super().load_state_dict(state)
        if self._adaptive_lr:
            for group, saved in zip(self.optimizer_step.optimizer.param_groups, state["optimizer"]["param_groups"]):
                group["lr"] = saved["lr"]

    def _learn_inputs(self, batch: Any) -> tuple:
        """What the learn model's forward takes for ``batch``: its observations (a recurrent policy adds its
        start states and episode starts, ``policies.ppo_lstm``)."""
        return (self._obs(batch.obs),)

    def _loss_weight(self, inputs: tuple) -> Optional[torch.Tensor]:
        """1 for the elements of the learn batch that count, 0 for the others (``policies.advantages``); None:
        every element counts (one agent per row)."""
        return None

    def _rows(self, value: torch.Tensor) -> torch.Tensor:
        """A field of the learn batch laid out as the model's outputs are: one row per transition (a
        recurrent policy's sequences ``[B, L]`` are flattened, ``policies.ppo_lstm``)."""
        return value

    @hot_path("learn")
    def _loss(self, inputs: tuple, action: torch.Tensor, adv: torch.Tensor, returns: torch.Tensor,
              logp_old: torch.Tensor, value_old: Optional[torch.Tensor], mask: Optional[torch.Tensor] = None,
              shares: Optional[torch.Tensor] = None) -> tuple:
        """The learner's hot path (compiled with ``policy.compile``): ``(loss, detached statistics)``; the
        advantages arrive normalised (``normalise_advantages``: its collective stays out of the compiled
        graph). One forward of the learn model on ``inputs`` (``_learn_inputs``), so that a DDP wrapper sees
        one forward and one backward per update. ``mask``: the legal actions of each row, whose masked
        distribution gives the log-probs and the entropy (``_dist``); ``shares``: each element's share of the
        loss's means (``policies.advantages.mean_shares`` of ``_loss_weight``), None for plain means."""
        head, value = self.learn_model(*inputs)
        dist = self._dist(head, mask)
        logp = self._log_prob(dist, action)
        policy_loss, stats = self._policy_loss(logp, logp_old, adv, shares)
        if value_old is not None:  # learn.value_clip
            clipped = value_old + (value - value_old).clamp(-self._clip, self._clip)
            value_loss = 0.5 * weighted_mean(torch.max((value - returns) ** 2, (clipped - returns) ** 2), shares)
        else:
            value_loss = 0.5 * weighted_mean((value - returns) ** 2, shares)
        entropy = weighted_mean(self._entropy(dist), shares)
        loss = policy_loss + self._value_weight * value_loss - self._entropy_weight * entropy
        return loss, {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(),
                      "entropy": entropy.detach(), **stats}

    # ---- act -------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward_collect(self, obs: Obs, random: bool = False) -> Dict[str, torch.Tensor]:
        """Sample an action; also return its log-prob and the state value, for GAE and the ratio. A continuous
        action goes to the env clipped to the bounds (``action``) and is learned from as sampled
        (``raw_action``)."""
        obs = self._obs(obs, "collect")
        action, logp, value = self._sample(self.placement.actor("collect"), obs, self._mask(obs))
        out = {"action": action, "logp": logp, "value": self.normalisation.denorm_value(value)}
        if self.continuous:
            out["raw_action"], out["action"] = action, self._in_bounds(action)
        return out

    @torch.inference_mode()
    def _forward_eval(self, obs: Obs) -> Dict[str, torch.Tensor]:
        """The most likely action (of the legal ones, where the observations carry a mask)."""
        obs = self._obs(obs, "eval")
        action = self._mode_action(self.placement.actor("eval"), obs, self._mask(obs))
        return {"action": self._in_bounds(action) if self.continuous else action}

    def _in_bounds(self, action: torch.Tensor) -> torch.Tensor:
        """A continuous action clipped to the action space's bounds, on its device."""
        low, high = self._bounds(action.device)
        return torch.clamp(action, low, high)

    def greedy_module(self) -> torch.nn.Module:
        """The most likely action: ``argmax`` of the logits (over the legal actions where the observations carry a
        mask), or the Gaussian mean clipped to the bounds (``Policy.greedy_module``). Dict/Tuple observations:
        the module takes the tree (``baton export`` refuses them: its formats take one tensor)."""
        if self.continuous:
            return GreedyActor(ActorOut(self.model), discrete=False, image=self._image, low=self._low, high=self._high,
                               preprocess=self.normalisation.frozen_obs_norm())
        return GreedyActor(ActorOut(self.model), discrete=True, image=self._image,
                           preprocess=self.normalisation.frozen_obs_norm())

    @torch.inference_mode()
    def _value(self, obs: Obs) -> torch.Tensor:
        """V(obs) for a batch of observations (GAE bootstraps from it), on ``obs``'s device (where the rollout
        is: the host for gymnasium envs, a device env's device)."""
        value = self._state_value(self.placement.actor("collect"), self._obs(obs, "collect"))
        return self.normalisation.denorm_value(value).to(first_leaf(obs).device)

    # the acting hot paths (compiled with policy.compile)
    @hot_path("collect")
    def _sample(self, model: torch.nn.Module, obs: Obs, mask: Optional[torch.Tensor] = None) -> tuple:
        head, value = model(obs)
        dist = self._dist(head, mask)
        action = dist.sample()
        return action, self._log_prob(dist, action), value

    @hot_path("eval", name="mode")
    def _mode_action(self, model: torch.nn.Module, obs: Obs, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        head, _ = model(obs)
        return head[0] if self.continuous else masked_argmax(head, mask)

    @hot_path("collect", name="value")
    def _state_value(self, model: torch.nn.Module, obs: Obs) -> torch.Tensor:
        return model.value(obs)

    def _obs(self, obs: Obs, mode: str = "learn") -> Obs:
        """Observations as the networks take them on ``mode``'s device (``policies.normalisation.model_obs``):
        float vectors normalised with ``policy.obs_norm``, uint8 frames left to the CNN, a tree as plain dicts
        (each key cast by its encoder, its vector keys normalised), which the compiled hot paths trace whole."""
        device = self.device if mode == "learn" else self.mode_devices[mode]
        return model_obs(obs, device, self.normalisation, image=self._image)

    # ---- reward scaling (policy.reward_norm) ------------------------------------------------------
    @property
    def scales_rewards(self) -> bool:
        """Whether ``policy.reward_norm`` is on (the GAE stage then calls ``scale_rewards``)."""
        return self.normalisation.reward_norm is not None

    def observe_returns(self, returns: torch.Tensor) -> None:
        """A rollout's value targets, for ``policy.value_norm``'s statistics (the GAE stage calls it)."""
        self.normalisation.observe_returns(returns)

    def scale_rewards(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """A time-major ``[T, E]`` rollout's rewards scaled by the running return's deviation
        (``Normalisation.scale_rewards``, at this policy's discount)."""
        return self.normalisation.scale_rewards(reward, done, self._gamma)

    # ---- state -----------------------------------------------------------------------------------
    def optimizer_settings(self) -> List[Dict[str, float]]:
        """The config's settings of the one parameter group (``policies.optim``)."""
        return [dict(lr=self.params.learn.learning_rate)]
