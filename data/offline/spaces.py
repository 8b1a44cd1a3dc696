"""A dataset's observations against spaces: nesting what Minari reads as the space says, the leaves' dtypes as
``transitions`` gives them, what a dataset can store, and whether a dataset's spaces fit an env's
(``data.offline.dataset``)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np

from ..obs import space_children, space_leaves
from .episode import DatasetError, Observations, observation_label

__all__ = ["check_storable", "as_arrays", "as_space", "leaf_rows", "space_difference", "compatible"]


def leaf_rows(leaf: np.ndarray, rows: np.ndarray, space: Optional[gym.Space]) -> np.ndarray:
    """The rows ``rows`` of one observation leaf as ``transitions`` gives them: float32 for floats, int64 for a
    ``Discrete`` or ``MultiDiscrete`` leaf (what an embedding takes), any other dtype kept (a uint8 image)."""
    out = np.asarray(leaf[rows])
    if np.issubdtype(out.dtype, np.floating):
        return out.astype(np.float32, copy=False)
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return out.astype(np.int64, copy=False)
    return out


def as_arrays(value: Any) -> Observations:
    """An observation as Minari reads it: nested dicts and tuples kept, every leaf an array."""
    if isinstance(value, Mapping):
        return {str(key): as_arrays(v) for key, v in value.items()}
    if isinstance(value, tuple):
        return tuple(as_arrays(v) for v in value)
    return np.asarray(value)


def as_space(value: Any, space: gym.Space, path: Tuple[str, ...] = ()) -> Observations:
    """``value`` nested as ``space`` (Minari writes a Dict's keys as groups, a Tuple's items as groups
    ``_index_i``): a Tuple's items taken from a tuple or from a mapping keyed "0", "1", ... (a tree's keys,
    ``data.obs.to_plain``), every leaf an array.

    Raises:
        DatasetError: a key the space has and the observation lacks, or the reverse, naming the key path.
    """
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        children = space_children(space)
        if isinstance(space, gym.spaces.Tuple) and isinstance(value, (tuple, list)):
            value = {str(i): v for i, v in enumerate(value)}
        have = sorted(map(str, value)) if isinstance(value, Mapping) else None
        if have != sorted(key for key, _ in children):
            raise DatasetError(f"{observation_label(path)}: the observation space {space} has keys "
                               f"{sorted(key for key, _ in children)}, the episode's observations "
                               f"{have if have is not None else 'are one array'}: record the episodes on the env "
                               f"whose observation space is written with them")
        value = {str(key): v for key, v in value.items()}
        nested = [(key, as_space(value[key], sub, path + (key,))) for key, sub in children]
        return dict(nested) if isinstance(space, gym.spaces.Dict) else tuple(v for _, v in nested)
    if isinstance(value, (Mapping, tuple)):
        raise DatasetError(f"{observation_label(path)}: the observation space is {space}, but the episode's observations "
                           f"there are a {type(value).__name__}: record the episodes on the env whose observation "
                           f"space is written with them")
    return np.asarray(value)


#: leaf spaces whose observations are arrays of a fixed shape, which a dataset stores as rows
_STORABLE = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def check_storable(observation_space: gym.Space, where: str) -> None:
    """Refuse an observation space with a leaf a dataset cannot store as rows of an array (a ``Text``,
    ``Graph``, ``Sequence`` or ``OneOf``), naming its key path and the fix; ``where`` names the env or dataset.

    Raises:
        DatasetError: naming the first such leaf.
    """
    for path, space in space_leaves(observation_space):
        if not isinstance(space, _STORABLE):
            raise DatasetError(
                f"{where}: {observation_label(path)} is a {type(space).__name__} space, whose observations have no fixed shape, "
                f"so a dataset cannot store them as rows of an array: drop the key with a gymnasium wrapper (e.g. "
                f"gymnasium.wrappers.FilterObservation) or encode it to a Box (a gymnasium.ObservationWrapper)")


def space_difference(a: gym.Space, b: gym.Space, path: Tuple[str, ...] = ()) -> Optional[str]:
    """None when ``a`` and ``b`` are compatible (``OfflineDataset.check_spaces``' rules), else what differs: ""
    for the whole space, or the key path that differs, with both of its spaces."""
    if isinstance(a, gym.spaces.Dict) and isinstance(b, gym.spaces.Dict) or (
            isinstance(a, gym.spaces.Tuple) and isinstance(b, gym.spaces.Tuple)):
        ours, theirs = dict(space_children(a)), dict(space_children(b))
        if set(ours) != set(theirs):
            return f"{observation_label(path)} has keys {sorted(ours)} in the dataset, {sorted(theirs)} in the env"
        for key in ours:
            difference = space_difference(ours[key], theirs[key], path + (key,))
            if difference is not None:
                return difference
        return None
    if compatible_leaf(a, b):
        return None
    return f"{observation_label(path)} is {a} in the dataset, {b} in the env" if path else ""


def compatible_leaf(a: gym.Space, b: gym.Space) -> bool:
    if isinstance(a, gym.spaces.Discrete) and isinstance(b, gym.spaces.Discrete):
        return int(a.n) == int(b.n)
    if isinstance(a, gym.spaces.Box) and isinstance(b, gym.spaces.Box):
        return tuple(a.shape) == tuple(b.shape)
    return a == b


def compatible(a: gym.Space, b: gym.Space) -> bool:
    """Whether ``a`` and ``b`` are compatible by ``OfflineDataset.check_spaces``' rules."""
    return space_difference(a, b) is None
