"""``policy.obs_norm`` for Dict and Tuple observations: a running normalisation of each vector key, never of
an image, a discrete key or a key its encoder already scales by its bounds (``normalisable_paths``), with
``policies.obs_norm.RunningObsNorm``'s interface over trees, which ``policies.normalisation`` uses."""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

import gymnasium as gym
import torch
from torch import nn

from data.batch import make_batch, ttorch

from .encoders import _leaf, _space_at, plan_encoders
from .key_encoders import KeyPath
from .obs_norm import RunningObsNorm

__all__ = ["normalisable_paths", "KeyedObsNorm", "FrozenKeyedObsNorm"]


def normalisable_paths(observation_space: gym.Space, encoders: Optional[Mapping[str, Any]] = None) -> List[KeyPath]:
    """The keys ``policy.obs_norm`` normalises: the Box keys encoded by "mlp" or "flatten" and not scaled by
    their bounds. Never an image (its pixels have their scale, and per-pixel statistics would erase a static
    background the convolutions see as one), never a Discrete, MultiDiscrete or MultiBinary key (an index or a
    bit, which a mean would turn into a number of another meaning), never a key scaled by its bounds (it would be
    scaled twice)."""
    return [plan.path for plan in plan_encoders(observation_space, encoders)
            if isinstance(plan.space, gym.spaces.Box) and plan.kind in ("mlp", "flatten") and not plan.scaled]


class KeyedObsNorm(nn.Module):
    """``policy.obs_norm`` for a Dict or Tuple observation: one ``RunningObsNorm`` per key of
    ``normalisable_paths``, with ``RunningObsNorm``'s interface over trees, so that ``policies.normalisation``
    can hold either: ``observe(tree)``, ``merge()`` (one all-reduce per key, in the same order on every rank),
    ``forward(tree) -> tree`` (those keys normalised, every other leaf the same tensor), ``frozen()`` (for
    ``baton export``) and the statistics in ``state_dict()`` (``norms.<i>.count/mean/m2``, ``i`` the key's place
    in ``paths``).

    Examples:
        >>> space = gym.spaces.Dict({"pos": gym.spaces.Box(-5, 5, (2,)), "room": gym.spaces.Discrete(3)})
        >>> norm = KeyedObsNorm(space)
        >>> norm.paths
        [('pos',)]
        >>> norm.observe({"pos": torch.tensor([[0.0, 10.0], [2.0, 30.0]]), "room": torch.tensor([0, 2])})
        >>> norm.merge()
        >>> out = norm({"pos": torch.tensor([[2.0, 30.0]]), "room": torch.tensor([2])})
        >>> out["pos"], out["room"]
        (tensor([[1., 1.]]), tensor([2]))
    """

    def __init__(self, observation_space: gym.Space, encoders: Optional[Mapping[str, Any]] = None,
                 clip: float = 10.0, eps: float = 1e-8, name: str = "policy.obs_norm_clip") -> None:
        super().__init__()
        self.paths = normalisable_paths(observation_space, encoders)
        if not self.paths:
            raise ValueError(f"policy.obs_norm=True: the observation space {observation_space} has no vector key "
                             f"to normalise (images, Discrete, MultiDiscrete, MultiBinary and keys scaled by their "
                             f"bounds are not); set policy.obs_norm=False")
        self.norms = nn.ModuleList(RunningObsNorm(_space_at(observation_space, path).shape, clip, eps, name)
                                   for path in self.paths)

    @torch.no_grad()
    def observe(self, obs: Any) -> None:
        """Add a batch of collected observations to each key's pending moments (``RunningObsNorm.observe``)."""
        for path, norm in zip(self.paths, self.norms):
            norm.observe(_leaf(obs, path))

    @torch.no_grad()
    def merge(self) -> None:
        """Merge each key's pending moments (``RunningObsNorm.merge``; every rank, same point, same order)."""
        for norm in self.norms:
            norm.merge()

    def forward(self, obs: Any) -> Any:
        return _replace(obs, {path: norm(_leaf(obs, path)) for path, norm in zip(self.paths, self.norms)})

    def frozen(self) -> "FrozenKeyedObsNorm":
        """The normalisation as it stands, on the CPU (``RunningObsNorm.frozen`` per key)."""
        return FrozenKeyedObsNorm(self.paths, [norm.frozen() for norm in self.norms])


class FrozenKeyedObsNorm(nn.Module):
    """``KeyedObsNorm.frozen()``: fixed per-key normalisations of a tree (``FrozenObsNorm`` each)."""

    def __init__(self, paths: Sequence[KeyPath], norms: Sequence[nn.Module]) -> None:
        super().__init__()
        self.paths = list(paths)
        self.norms = nn.ModuleList(norms)

    def forward(self, obs: Any) -> Any:
        return _replace(obs, {path: norm(_leaf(obs, path)) for path, norm in zip(self.paths, self.norms)})


def _replace(obs: Any, new: Mapping[KeyPath, torch.Tensor]) -> Any:
    """A new tree of ``obs``'s kind (a ``ttorch.Tensor`` or plain dicts) with the leaves at ``new``'s paths
    replaced and every other leaf the same tensor: ``obs`` itself is left as it is (a replay buffer keeps the raw
    observations)."""
    tree = _rebuild(obs, (), new)
    return make_batch(tree) if isinstance(obs, ttorch.Tensor) else tree


def _rebuild(node: Any, path: KeyPath, new: Mapping[KeyPath, torch.Tensor]) -> Any:
    if path in new:
        return new[path]
    if isinstance(node, (ttorch.Tensor, Mapping)):
        return {key: _rebuild(node[key], path + (str(key),), new) for key in node.keys()}
    return node
