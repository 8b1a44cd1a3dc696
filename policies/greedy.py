"""The greedy acting policy as one torch module: the env's observation batch in, the env's action batch out.

``Policy.greedy_module()`` returns it for ``baton export`` (TorchScript, ONNX): everything the eval mode does
between the env and the action is inside, so the exported file needs neither baton nor the config:

- observations as the env gives them: float vectors (cast to float32 here) or uint8 image stacks (the
  Nature CNN scales them to [0, 1] itself), then the policy's preprocessing (``policy.obs_norm``: the
  running statistics as they were, ``policies.obs_norm.FrozenObsNorm``);
- the network's output turned into an action: ``argmax`` for discrete actions; for continuous ones the
  squashed output scaled from [-1, 1] to the action bounds and/or clipped to them, as the eval mode does.

The module holds a copy of the weights on the CPU, in eval mode and without gradients: exporting never
touches the live policy.

A policy whose observation is a Dict/Tuple has a greedy module too (``structured``: it takes the observation
tree, a ``ttorch.Tensor`` or nested dicts, each key in the env's dtype), which runs in Python; the exported
formats take one ``obs`` tensor, so ``baton export`` refuses such a policy (``check_exportable_observation``).
"""
from __future__ import annotations

import copy
from typing import Any, Optional

import gymnasium as gym
import numpy as np
import torch
from torch import nn

__all__ = ["GreedyActor", "NotExportableError", "TanhMean", "ActorOut", "check_exportable_observation"]


class NotExportableError(TypeError):
    """A policy, or a part of it, that cannot be written as a standalone acting module; the message names it."""


def check_exportable_observation(observation_space: gym.Space, fmt: str) -> None:
    """Refuse to write a ``fmt`` file (ONNX, TorchScript) of a policy whose observation is a Dict/Tuple.

    Why: the file's graph takes one input tensor ``obs`` of one shape and dtype, and such an observation is
    several arrays of their own shapes and dtypes (an image uint8, a position float32), keyed by name; the
    policy's greedy module takes the tree in Python.

    Raises:
        NotExportableError: in one line naming the format and why.
    """
    if isinstance(observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):
        raise NotExportableError(f"--format {fmt}: a policy whose observation is a Dict/Tuple cannot be exported: "
                                 f"a {fmt} file takes one observation tensor, and this observation is "
                                 f"{len(observation_space.spaces)} keyed arrays of their own shapes and dtypes "
                                 f"({type(observation_space).__name__} space); act with the policy in Python "
                                 f"(baton eval)")


class GreedyActor(nn.Module):
    """``obs -> action`` of a policy's eval mode (module docstring).

    Args:
        net: the network from (float or uint8) observations to logits / Q-values (``discrete``) or to the
            action before scaling (continuous); deep-copied to the CPU.
        discrete: act with ``argmax`` over the last dimension.
        image: observations are uint8 frames that ``net`` scales itself (they are not cast to float).
        scale, bias: continuous actions: ``action = out * scale + bias`` (from [-1, 1] to the bounds).
        low, high: continuous actions: clip to these bounds (after scaling).
        preprocess: applied to the float observations before ``net`` (observation normalisation); copied.
        structured: observations are trees (a Dict/Tuple observation space) that ``net`` encodes key by key,
            casting each itself: they go to ``preprocess`` and ``net`` as they come.

    Examples:
        >>> actor = GreedyActor(nn.Linear(3, 2), discrete=True)
        >>> actor(torch.zeros(4, 3)).shape
        torch.Size([4])
    """

    def __init__(self, net: nn.Module, discrete: bool, image: bool = False, scale: Optional[np.ndarray] = None,
                 bias: Optional[np.ndarray] = None, low: Optional[np.ndarray] = None,
                 high: Optional[np.ndarray] = None, preprocess: Optional[nn.Module] = None,
                 structured: bool = False) -> None:
        super().__init__()
        self.net = copy.deepcopy(net).cpu().eval().requires_grad_(False)
        self.preprocess = None if preprocess is None else copy.deepcopy(preprocess).cpu().eval().requires_grad_(False)
        self.discrete = bool(discrete)
        self.image = bool(image)
        self.structured = bool(structured)
        self.scaled = scale is not None
        self.clipped = low is not None
        if (scale is None) != (bias is None) or (low is None) != (high is None):
            raise ValueError("give scale with bias, and low with high")
        for name, value in (("scale", scale), ("bias", bias), ("low", low), ("high", high)):
            if value is not None:
                self.register_buffer(name, torch.as_tensor(np.asarray(value, dtype=np.float32)))

    def forward(self, obs: Any) -> torch.Tensor:
        if self.structured:
            obs = obs if self.preprocess is None else self.preprocess(obs)
        elif not self.image:
            obs = obs.float() if self.preprocess is None else self.preprocess(obs.float())
        out = self.net(obs)
        if self.discrete:
            return out.argmax(dim=-1)
        if self.scaled:
            out = out * self.scale + self.bias
        if self.clipped:
            out = torch.maximum(torch.minimum(out, self.high), self.low)
        return out


class TanhMean(nn.Module):
    """``tanh`` of the mean of an actor returning ``(mean, log_std)``: SAC's greedy action in (-1, 1)."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.actor(obs)[0])


class ActorOut(nn.Module):
    """An actor-critic's actor output alone (``ActorCritic.actor_out``): PPO's logits or Gaussian mean."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.model.actor_out(obs)
