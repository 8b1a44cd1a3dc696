"""The encoder of one key of a Dict or Tuple observation: its settings (``EncoderParams``, the config's
``policy.model.encoders.<key>``), what it was planned to be (``EncoderPlan``) and the module that makes its
features (``leaf_encoder``: ``DenseEncoder`` for a Box or MultiBinary key, ``CategoricalEncoder`` for a Discrete
or MultiDiscrete one). ``policies.encoders`` plans every key of a space and joins their features.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from engine.params import Params, param

from .layers import Linear, NatureCNN, mlp

__all__ = ["ENCODER_TYPES", "NATURE_MIN_SIZE", "KeyPath", "EncoderParams", "EncoderPlan", "DenseEncoder",
           "CategoricalEncoder", "conv_stack", "leaf_encoder"]

#: the words of ``EncoderParams.type``
ENCODER_TYPES = ("auto", "cnn", "mlp", "embedding", "flatten")
#: the smallest height and width the Nature CNN is used for (it needs 36x36; below 64 its 8x8/4 first layer
#: throws most of a small image away, so a small image gets the 3x3 stack)
NATURE_MIN_SIZE = 64
KeyPath = Tuple[str, ...]


@dataclass
class EncoderParams(Params):
    """``policy.model.encoders.<key>``: how one key of a Dict or Tuple observation is encoded (module docstring)."""

    type: str = param("auto", choices=ENCODER_TYPES)
    """"auto": chosen by the key's space (module docstring); "cnn": convolutions over a 3-dim Box ([C, H, W] or
    [H, W, C]); "mlp": flattened, then ``hidden_sizes``; "embedding": a learned vector per value of a Discrete
    or MultiDiscrete key; "flatten": the values as floats (a Discrete or MultiDiscrete key one-hot, as
    gymnasium.spaces.flatten does)."""
    hidden_sizes: List[int] = param([64])
    """The layers of the MLP that makes an "mlp" key's features and follows a "cnn" key's convolutions ([]: the
    convolutions' flattened output as it is; "auto" picks "flatten" for a Box with []). Unused by "embedding"
    and "flatten"."""
    normalise: Optional[bool] = param(None)
    """Scale a Box key into [0, 1] by its space's bounds, (x - low) / (high - low): None scales uint8 keys
    (pixels: 1/255), True any Box with finite bounds, False none. Only a Box key takes True."""
    embedding_dim: int = param(16, rule="at_least_one")
    """The size of the learned vector of each value of a Discrete key (of each component of a MultiDiscrete)."""


@dataclass(frozen=True)
class EncoderPlan:
    """What one leaf key gets: its path and space, the encoder ``kind`` chosen ("cnn", "mlp", "embedding",
    "flatten"), its settings, whether a Box is scaled into [0, 1] and whether an image is channels-last."""

    path: KeyPath
    space: gym.Space
    kind: str
    settings: EncoderParams
    scaled: bool = False
    channels_last: bool = False


class _LeafEncoder(nn.Module):
    """One key's encoder. A subclass defines ``features(x [N, *event_shape]) -> [N, out_dim]``; ``forward`` takes
    any leading dims (``[B]`` for acting, ``[B, L]`` for a recurrent unroll) and keeps them."""

    event_ndim: int
    out_dim: int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:x.dim() - self.event_ndim]
        out = self.features(x.reshape((-1,) + tuple(x.shape[x.dim() - self.event_ndim:])))
        return out.reshape(tuple(lead) + (self.out_dim,))


class DenseEncoder(_LeafEncoder):
    """A Box or MultiBinary key: scaled by its bounds when ``plan.scaled``, then convolutions ("cnn", an image
    permuted to [C, H, W] first when channels-last) or a flatten, then the MLP of ``hidden_sizes`` ("cnn",
    "mlp")."""

    def __init__(self, plan: EncoderPlan, activation: type = nn.ReLU, linear: Linear = nn.Linear) -> None:
        super().__init__()
        shape = tuple(int(d) for d in plan.space.shape)
        self.event_ndim = len(shape)
        self.channels_last = plan.channels_last
        self.scaled = plan.scaled
        if plan.scaled:
            low, span = _bounds(plan.space)
            self.register_buffer("low", low, persistent=False)  # from the space: not a checkpoint's business
            self.register_buffer("span", span, persistent=False)
        self.cnn: Optional[nn.Module] = None
        if plan.kind == "cnn":
            chw = (shape[2], shape[0], shape[1]) if plan.channels_last else shape
            self.cnn = conv_stack(*chw)
            in_dim = _flat_size(self.cnn, chw)
        else:
            in_dim = int(np.prod(shape, dtype=np.int64))
        sizes = plan.settings.hidden_sizes if plan.kind in ("cnn", "mlp") else []
        self.mlp = mlp(in_dim, sizes, activation, linear)
        self.out_dim = int(sizes[-1]) if sizes else in_dim

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if self.scaled:
            x = (x - self.low) / self.span
        if self.cnn is None:
            return self.mlp(x.reshape(x.shape[0], -1))
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return self.mlp(self.cnn(x))


def _bounds(space: gym.spaces.Box) -> Tuple[torch.Tensor, torch.Tensor]:
    """The space's low and high - low as float32 tensors (scalars when the same for every element), a zero span
    taken as 1 (a constant element is left at 0)."""
    low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
    if np.all(low == low.flat[0]) and np.all(high == high.flat[0]):
        low, high = low.flat[0], high.flat[0]
    span = np.where(high > low, high - low, 1.0)
    return torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(span, dtype=torch.float32)


def conv_stack(channels: int, height: int, width: int) -> nn.Module:
    """The convolutions of an image ``[C, H, W]``, flattened: the Nature CNN's (``policies.models.NatureCNN``)
    from 64x64 up, else three 3x3 convolutions (32, 64, 64 channels, ReLU) that fit small images: each halves a
    side of 16 or more (stride 2), trims a smaller one by 2 (no padding: MiniGrid's 7x7 -> 5 -> 3 -> 1), and
    keeps one below 3 (padding 1). Its output size: ``_flat_size``."""
    if min(height, width) >= NATURE_MIN_SIZE:
        return NatureCNN(channels, height, width).net  # the modules only: NatureCNN.forward divides by 255
    layers: List[nn.Module] = []
    size = min(height, width)
    for out in (32, 64, 64):
        stride, padding = (2, 1) if size >= 16 else ((1, 0) if size >= 3 else (1, 1))
        layers += [nn.Conv2d(channels, out, 3, stride=stride, padding=padding), nn.ReLU()]
        size = (size + 2 * padding - 3) // stride + 1
        channels = out
    return nn.Sequential(*layers, nn.Flatten())


def _flat_size(body: nn.Module, chw: Sequence[int]) -> int:
    with torch.no_grad():
        return int(body(torch.zeros((1,) + tuple(chw))).shape[1])


class CategoricalEncoder(_LeafEncoder):
    """A Discrete or MultiDiscrete key: its values less ``start``, each component's offset into one table of
    ``sum(nvec)`` rows (one ``nn.Embedding`` that holds a table per component: one lookup, not one per
    component), then learned vectors concatenated ("embedding"), or one-hot ("flatten"), then an MLP ("mlp").
    A value outside the space is an index error of the lookup."""

    def __init__(self, plan: EncoderPlan, activation: type = nn.ReLU, linear: Linear = nn.Linear) -> None:
        super().__init__()
        space = plan.space
        if isinstance(space, gym.spaces.Discrete):
            nvec, start, self.event_ndim = np.array([int(space.n)]), np.array([int(space.start)]), 0
        else:
            nvec, start = np.asarray(space.nvec).reshape(-1), np.asarray(space.start).reshape(-1)
            self.event_ndim = len(space.shape)
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        self.register_buffer("shift", torch.as_tensor(offsets - start, dtype=torch.long), persistent=False)
        self.components, self.rows = int(nvec.size), int(nvec.sum())
        self.one_hot = plan.kind != "embedding"
        if self.one_hot:
            self.embedding = None
            sizes = plan.settings.hidden_sizes if plan.kind == "mlp" else []
            self.mlp = mlp(self.rows, sizes, activation, linear)
            self.out_dim = int(sizes[-1]) if sizes else self.rows
        else:
            self.embedding = nn.Embedding(self.rows, plan.settings.embedding_dim)
            self.mlp = nn.Sequential()
            self.out_dim = self.components * plan.settings.embedding_dim

    def features(self, x: torch.Tensor) -> torch.Tensor:
        index = x.reshape(x.shape[0], self.components).long() + self.shift
        if self.embedding is not None:
            return self.embedding(index).reshape(x.shape[0], self.out_dim)
        hot = torch.zeros(x.shape[0], self.rows, device=x.device).scatter_(1, index, 1.0)
        return self.mlp(hot)


def leaf_encoder(plan: EncoderPlan, activation: type, linear: Linear) -> _LeafEncoder:
    if isinstance(plan.space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return CategoricalEncoder(plan, activation, linear)
    return DenseEncoder(plan, activation, linear)


