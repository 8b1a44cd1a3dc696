"""The greedy acting policy as one torch module: the env's observation batch in, the env's action batch out.

``Policy.greedy_module()`` returns it for ``baton export`` (TorchScript, ONNX): everything the eval mode does
between the env and the action is inside, so the exported file needs neither baton nor the config:

- observations as the env gives them: float vectors (cast to float32 here) or uint8 image stacks (the
  Nature CNN scales them to [0, 1] itself), then the policy's preprocessing (``policy.obs_norm``: the
  running statistics as they were, ``policies.obs_norm.FrozenObsNorm``);
- the network's output turned into an action: ``argmax`` for discrete actions (over the legal ones where the
  observation is a tree with an ``action_mask``, ``policies.masks``); for continuous ones the squashed output
  scaled from [-1, 1] to the action bounds and/or clipped to them, as the eval mode does.

Dict or Tuple observations: the module takes the tree (a ``ttorch.Tensor`` or nested mappings of tensors), whose
keys the network's encoders cast themselves, and masks with its ``action_mask``; ``baton export``'s formats take
one tensor, so it refuses such a policy (``commands.export``).

The module holds a copy of the weights on the CPU, in eval mode and without gradients: exporting never
touches the live policy.
"""
from __future__ import annotations

import copy
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from .masks import action_mask, masked_argmax
from .noisy import set_noise

__all__ = ["GreedyActor", "NotExportableError", "TanhMean", "ActorOut", "ExpectedQ"]


class NotExportableError(TypeError):
    """A policy, or a part of it, that cannot be written as a standalone acting module; the message names it."""


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

    A tree of observations (Dict/Tuple spaces) is not cast (``net``'s encoders cast each key), only preprocessed,
    and a discrete action is the argmax over the legal actions of its ``action_mask``, where it carries one.

    Examples:
        >>> actor = GreedyActor(nn.Linear(3, 2), discrete=True)
        >>> actor(torch.zeros(4, 3)).shape
        torch.Size([4])
    """

    def __init__(self, net: nn.Module, discrete: bool, image: bool = False, scale: Optional[np.ndarray] = None,
                 bias: Optional[np.ndarray] = None, low: Optional[np.ndarray] = None,
                 high: Optional[np.ndarray] = None, preprocess: Optional[nn.Module] = None) -> None:
        super().__init__()
        self.net = copy.deepcopy(net).cpu().eval().requires_grad_(False)
        self.preprocess = None if preprocess is None else copy.deepcopy(preprocess).cpu().eval().requires_grad_(False)
        self.discrete = bool(discrete)
        self.image = bool(image)
        self.scaled = scale is not None
        self.clipped = low is not None
        if (scale is None) != (bias is None) or (low is None) != (high is None):
            raise ValueError("give scale with bias, and low with high")
        for name, value in (("scale", scale), ("bias", bias), ("low", low), ("high", high)):
            if value is not None:
                self.register_buffer(name, torch.as_tensor(np.asarray(value, dtype=np.float32)))

    def forward(self, obs: Any) -> torch.Tensor:
        if not isinstance(obs, torch.Tensor):  # a tree (module docstring)
            return self._act(obs if self.preprocess is None else self.preprocess(obs), action_mask(obs))
        if not self.image:
            obs = obs.float() if self.preprocess is None else self.preprocess(obs.float())
        return self._act(obs, None)

    def _act(self, obs: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        """The action of the network's output on ``obs`` (preprocessed); ``mask``: the legal actions, or None."""
        out = self.net(obs)
        if self.discrete:
            return masked_argmax(out, mask)
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


class ExpectedQ(nn.Module):
    """``[B, A]`` Q-values of a ``QNetwork`` as its eval mode acts on them: a distributional head's expected
    values (the argmax over its atoms would be no action), and noisy layers on their mean weights (a trace of
    the noise would act at random). The network is a copy, kept on the CPU (where ``GreedyActor`` puts it), so the
    live one keeps its noise for collection."""

    def __init__(self, q_network: nn.Module) -> None:
        super().__init__()
        self.q_network = copy.deepcopy(q_network).cpu()
        set_noise(self.q_network, False)

    def forward(self, obs: Any) -> torch.Tensor:
        return self.q_network.expectation(self.q_network(obs))
