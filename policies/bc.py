"""Behaviour cloning: supervised learning of the dataset's actions from its observations.

One update, on one screen (``_loss``)::

    discrete:    loss = cross_entropy(logits(obs), action)
    continuous:  loss = mean((tanh(mu(obs)) - action_in_[-1, 1])^2)

Acting: the most likely action (discrete), or ``tanh(mu(obs))`` in env units (continuous); the collect
mode takes ``eps``, the probability of a uniformly random action instead (as DQN's does).
Offline (``pipeline = "offline"``): it trains from ``dataset.name``, never from an env.

Dict/Tuple observations (a dataset recorded on such an env, ``data.offline``) reach the network as trees, each
key encoded by its own encoder (``policy.model.encoders``, ``policies.encoders``, as DQN's and TD3's). Where
they carry a legal-action mask (``action_mask``, ``policies.masks``) the greedy action and the random one of
``eps`` are legal ones, as DQN's; the loss is the cross-entropy over all actions (the dataset's are legal).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Union

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from engine.params import Params, param, section
from engine.registry import POLICY_REGISTRY

from .accel import hot_path
from .base import Policy, resolve_shape, space_dims
from .defaults import OfflineEvalParams, PolicyParams
from .greedy import GreedyActor
from .continuous_models import DeterministicActor
from .masks import action_mask, masked_argmax, observation_has_mask, random_legal
from .models import QNetwork
from .normalisation import model_obs
from .optim import OptimizerStep
from .placement import DeviceGenerators, PerDevice
from .spaces import model_observation

__all__ = ["BCPolicy", "BCParams", "BCModelParams", "BCLearnParams"]


@dataclass
class BCModelParams(Params):
    """BC's ``policy.model``: one MLP from the observation (its keys' encoders first, for a Dict/Tuple one) to the
    action (continuous) or its logits (discrete)."""

    obs_shape: Optional[Union[int, List[int]]] = param(None)
    """None: taken from the env's observation space (and recorded in the run's config); given: checked
    against it at start (a Dict/Tuple observation has none)."""
    action_shape: Optional[Union[int, List[int]]] = param(None)
    """None: taken from the env's action space (its dimension, or its number of actions); given: checked
    against it at start."""
    hidden_size_list: List[int] = param([256, 256])
    """Widths of the MLP's hidden layers."""
    encoders: Dict[str, Any] = param({})
    """Dict/Tuple observations: how each key is encoded, by its key path as nested mappings
    (``policies.encoders.EncoderParams``: ``encoders.image.type=cnn``); a key not named is encoded by its space."""


@dataclass
class BCLearnParams(Params):
    """BC's ``policy.learn``: supervised updates on the dataset's batches."""

    batch_size: int = param(256, rule="at_least_one")
    """Transitions per update."""
    update_per_iter: int = param(10)
    """Updates per loop iteration (the DDP ranks agree once per iteration)."""
    learning_rate: float = param(1e-3, rule="positive")
    """Adam's learning rate."""
    weight_decay: float = param(0.0)
    """Adam's L2 penalty on the weights; 0: none."""
    grad_clip_norm: float = param(0.0)
    """> 0: clip the gradient's norm to this before each step; 0: no clipping."""


@dataclass
class BCParams(PolicyParams):
    """BC's ``policy`` section (``BCPolicy``): learning from a dataset, no collection and no replay buffer of its
    own."""

    model: BCModelParams = section(BCModelParams)
    """The network."""
    learn: BCLearnParams = section(BCLearnParams)
    """The update."""
    eval: OfflineEvalParams = section(OfflineEvalParams)
    """Evaluation (``OfflineEvalParams``)."""


@POLICY_REGISTRY.register("bc")
class BCPolicy(Policy):
    """Behaviour cloning for discrete or continuous actions (``create_config.policy.type='bc'``)."""

    pipeline = "offline"
    action_spaces = ("discrete", "continuous")
    default_env_steps = None
    eager_acting = "through an MLP's lean forward on the CPU (faster than the module at a few rows)"  # discrete

    Params = BCParams

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        obs_shape, action_dim, continuous = space_dims(observation_space, action_space, "bc", structured=True)
        model_observation(cfg["model"], observation_space, obs_shape, "bc")  # filled or checked
        # a flat observation's size (the model it always had), or the Dict/Tuple space its encoders take
        obs_in = observation_space if obs_shape is None else int(obs_shape[0])
        resolve_shape(cfg["model"], "action_shape", action_dim, "bc", f"action space {action_space}")
        observation_has_mask(observation_space, action_space, "bc")  # a mask that cannot be used: named here
        hidden, encoders = self.params.model.hidden_size_list, self.params.model.encoders
        self._continuous = continuous
        if continuous:
            if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
                raise ValueError(f"policy 'bc' needs a bounded continuous action space, got {action_space}")
            self._scale = torch.as_tensor((action_space.high - action_space.low) / 2.0, dtype=torch.float32)
            self._bias = torch.as_tensor((action_space.high + action_space.low) / 2.0, dtype=torch.float32)
            self._affine = PerDevice.copies(self._scale, self._bias)
            self.model = self.placement.build(lambda: DeterministicActor(obs_in, action_dim, hidden, encoders))
        else:  # logits through an MLP with a plain head (argmax through its lean forward on the CPU)
            self.model = self.placement.build(lambda: QNetwork(obs_in, action_dim, hidden, dueling=False,
                                                               encoders=encoders))
        self.optimizer_step = OptimizerStep.adam([self.model.parameters()], self.optimizer_settings(), "BC")
        self._grad_clip = float(self.params.learn.grad_clip_norm)
        self._action_dim = action_dim
        self._generators = DeviceGenerators()  # eps's draws, on the collect device

    # ---- learn -----------------------------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        obs = model_obs(batch.obs, self.device, self.normalisation)  # a tree's leaves keep their dtypes
        if self._continuous:
            target = (batch.action.to(self.device).float() - self._bias.to(self.device)) / self._scale.to(self.device)
        else:
            target = batch.action.to(self.device).long()
        loss, stats = self._loss(obs, target)
        self.optimizer_step.step(loss, self._grad_clip)
        return {"loss": loss.detach(), **stats}

    @hot_path("learn")
    def _loss(self, obs: Any, target: torch.Tensor) -> tuple:
        """The learner's hot path (compiled with ``policy.compile``): ``(loss, detached statistics)``;
        ``target`` is the action in [-1, 1] (continuous) or its index (discrete)."""
        if self._continuous:
            pred = self.learn_model(obs)
            loss = F.mse_loss(pred, target.clamp(-1.0, 1.0))
            return loss, {"action_error": (pred.detach() - target).abs().mean()}
        logits = self.learn_model(obs)
        loss = F.cross_entropy(logits, target)
        return loss, {"accuracy": (logits.detach().argmax(dim=1) == target).float().mean()}

    # ---- act -------------------------------------------------------------------------------------
    def _act(self, obs: Any, mode: str) -> torch.Tensor:
        """The cloned action on ``mode``'s device: its index (discrete; a legal one where ``obs`` carries a mask),
        or in env units (continuous)."""
        model = self.placement.actor(mode)
        device = self.mode_devices[mode]
        obs = model_obs(obs, device, self.normalisation)
        if not self._continuous and device.type == "cpu" and model.host_acting:  # an MLP's lean forward
            return model.host_greedy_action(obs)
        with torch.inference_mode():
            out = self._action[mode](model, obs)
        if not self._continuous:
            return out
        scale, bias = self._affine(device)
        return out * scale + bias

    @hot_path("collect", "eval", name="act")
    def _action(self, model: torch.nn.Module, obs: Any) -> torch.Tensor:
        """The acting hot path: the most likely (legal) action's index, or the action in [-1, 1]."""
        out = model(obs)
        return out if self._continuous else masked_argmax(out, action_mask(obs))

    def _forward_collect(self, obs: Any, eps: float = 0.0) -> Dict[str, torch.Tensor]:
        """The cloned action; with probability ``eps`` per env a uniformly random (legal) one instead."""
        action = self._act(obs, "collect")
        if eps > 0:
            device = action.device
            generator = self._generators.on(device)
            explore = torch.rand(len(action), generator=generator, device=device) < eps
            mask = None if self._continuous else action_mask(obs)
            if self._continuous:
                scale, bias = self._affine(device)  # uniform over the bounds
                random_action = (2 * torch.rand(action.shape, generator=generator, device=device) - 1) * scale + bias
                explore = explore.reshape((-1,) + (1,) * (action.dim() - 1))
            elif mask is not None:
                u = torch.rand(len(action), generator=generator, device=device)
                random_action = random_legal(u, mask.to(device))
            else:
                random_action = torch.randint(0, self._action_dim, action.shape, generator=generator, device=device)
            action = torch.where(explore, random_action, action)
        return {"action": action}

    def _forward_eval(self, obs: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"action": self._act(obs, "eval")}

    def greedy_module(self) -> torch.nn.Module:
        """The cloned action: ``argmax`` of the logits, or the squashed action scaled to the bounds
        (``Policy.greedy_module``)."""
        if self._continuous:
            return GreedyActor(self.model, discrete=False, scale=self._scale.numpy(), bias=self._bias.numpy())
        return GreedyActor(self.model, discrete=True)  # a tree: its encoders cast it, its mask applies

    # ---- state -----------------------------------------------------------------------------------
    def optimizer_settings(self) -> List[Dict[str, float]]:
        """The config's settings of the one parameter group (``policies.optim``)."""
        learn = self.params.learn
        return [dict(lr=learn.learning_rate, weight_decay=learn.weight_decay)]
