"""What the env loop does with observations, and with the other per-env rows it carries, in a few functions.

The loop (``data.env_loop``), the collectors and the replay never index, join or move an observation themselves:
they call these. An observation is one tensor ``[num_envs, *obs_shape]`` (a gymnasium ``Box``), or, for a
dictionary observation (gymnasium ``spaces.Dict``, nested ones, and ``spaces.Tuple`` as a dict with keys
``"0"``, ``"1"``, ...), a DI-treetensor tree (``treetensor.torch.Tensor``, imported through ``data.batch``) of
such tensors, one leaf per sub-space, each with its own shape and dtype (an image stays uint8). Every
function takes either; a flat observation never becomes a tree, and its path costs one type check at most.

- ``to_tensor``: a vector env's output as a tensor or a tree, without a copy (``torch.from_numpy`` per array);
- ``index_rows`` / ``replace_rows``: some envs' rows, and a copy of a vector env's numpy output with some rows
  replaced (the real final observations where episodes ended);
- ``stack`` / ``cat``: steps into a time-major ``[T, E, ...]`` chunk; env groups' rows into one step
  (``cat_numpy``: their numpy outputs, where ``data.env_groups`` steps them as one vector env);
- ``to_device``: onto a device (a no-op where it already is);
- ``all_finite``: whether every float value of some values is finite (one read of a device's tensors: call it once
  per collection, not per step).

Trees, for code that must look inside one (the replay allocates per leaf, a checkpoint stores plain dicts):
``is_tree``, ``leaves`` (each leaf with its key path), ``map_leaves``, ``first_leaf`` / ``num_rows`` (a
tree's ``len`` is its number of keys, not of rows), ``nbytes``, ``to_plain`` / ``from_plain`` (a tree as
nested plain dicts of tensors, which ``torch.load(weights_only=True)`` reads) and ``space_nbytes`` (the bytes
of one observation of a gymnasium space, every leaf counted).

Examples:
    >>> import numpy as np
    >>> obs = to_tensor(replace_rows(np.zeros((3, 2), np.float32), [1], [np.ones(2)]))
    >>> obs.tolist()
    [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    >>> stack([obs, obs]).shape, cat([obs, obs]).shape, all_finite(obs)
    (torch.Size([2, 3, 2]), torch.Size([6, 2]), True)
    >>> tree = to_tensor({"image": np.zeros((3, 2, 2), np.uint8), "pos": (np.zeros(3), np.ones((3, 2)))})
    >>> [(path, leaf.shape[1:], leaf.dtype) for path, leaf in leaves(stack([tree, tree]))]
    [(('image',), torch.Size([3, 2, 2]), torch.uint8), (('pos', '0'), torch.Size([3]), torch.float64), \
(('pos', '1'), torch.Size([3, 2]), torch.float64)]
    >>> num_rows(tree), len(tree), nbytes(tree)
    (3, 2, 84)
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Mapping, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import torch

from .batch import TreeValue, create_storage, flatten, mapping, ttorch  # treevalue, imported without its warnings

__all__ = ["Obs", "to_tensor", "index_rows", "replace_rows", "stack", "cat", "to_device", "all_finite", "cat_numpy",
           "is_tree", "leaves", "map_leaves", "first_leaf", "num_rows", "nbytes", "to_plain", "from_plain",
           "space_nbytes", "space_children", "space_leaves"]

#: an observation: a tensor, or a tree of tensors (``treetensor.torch.Tensor``)
Obs = Union[torch.Tensor, "ttorch.Tensor"]


# ---- trees ----------------------------------------------------------------------------------------------
def is_tree(value: Any) -> bool:
    """Whether ``value`` is a tree of tensors (a dictionary observation, or a batch) rather than one tensor."""
    return isinstance(value, TreeValue)


def leaves(value: Obs) -> List[Tuple[Tuple[str, ...], torch.Tensor]]:
    """Every tensor of ``value`` with its key path, in key order: ``[((), value)]`` for a tensor. For code
    that keeps something per leaf (a staging buffer, an error naming the key), never to rebuild a tree.
    Sorted by path: treevalue's own order follows how a tree was built (a stacked tree's may differ)."""
    return sorted(flatten(value), key=_path) if isinstance(value, TreeValue) else [((), value)]


def _path(item: Tuple[Tuple[str, ...], torch.Tensor]) -> Tuple[str, ...]:
    return item[0]


def map_leaves(fn: Callable[..., torch.Tensor], value: Obs, with_path: bool = False) -> Obs:
    """``fn`` of every tensor of ``value``, as a tree of the same keys (``fn(value)`` for a tensor): one
    place for what treetensor has no method for (allocating a ring like a leaf, a host copy). With
    ``with_path``, ``fn(leaf, path)`` also gets the leaf's key path (``()`` for a tensor), for what is kept
    per leaf (a staging buffer). A tree as plain nested dicts (``to_plain``: what a compiled hot path takes) maps
    to plain dicts."""
    if isinstance(value, TreeValue):
        return mapping(value, (lambda leaf, path: fn(leaf, tuple(path))) if with_path else (lambda leaf: fn(leaf)))
    if isinstance(value, Mapping):
        return _map_plain(fn, value, (), with_path)
    return fn(value, ()) if with_path else fn(value)


def _map_plain(fn: Callable[..., torch.Tensor], value: Any, path: Tuple[str, ...], with_path: bool) -> Any:
    if isinstance(value, Mapping):
        return {key: _map_plain(fn, child, path + (key,), with_path) for key, child in value.items()}
    return fn(value, path) if with_path else fn(value)


def first_leaf(value: Obs) -> torch.Tensor:
    """A tensor of ``value`` (itself for a tensor): its rows and device are the tree's (a tree as plain dicts
    too)."""
    if isinstance(value, torch.Tensor):  # first: the replay asks for every field of every push
        return value
    if isinstance(value, TreeValue):
        return flatten(value)[0][1]
    while isinstance(value, Mapping):
        value = next(iter(value.values()))
    return value


def num_rows(value: Obs) -> int:
    """The leading dimension of a tensor or of every leaf of a tree (``len`` of a tree counts its keys)."""
    return len(first_leaf(value))


def nbytes(value: Obs) -> int:
    """Bytes of every tensor of ``value``."""
    return sum(leaf.numel() * leaf.element_size() for _, leaf in leaves(value))


def to_plain(value: Obs) -> Union[torch.Tensor, Dict[str, Any]]:
    """A tree as nested plain dicts of its tensors (a tensor as it is): what a checkpoint holds, since
    ``torch.load(weights_only=True)`` reads dicts and tensors but no tree class."""
    if not isinstance(value, TreeValue):
        return value
    return {key: to_plain(child) for key, child in value.items()}


def from_plain(value: Union[torch.Tensor, Mapping[str, Any]]) -> Obs:
    """The tree (or tensor) ``to_plain`` gave."""
    return _make_tree(value) if isinstance(value, Mapping) else value


def _make_tree(nested: Mapping[str, Any]) -> "ttorch.Tensor":
    """A tree over nested mappings of tensors, without copying them (``data.batch.make_batch``'s way: the
    ``ttorch.Tensor(dict)`` constructor formats every tensor's repr, a thousand times slower)."""
    return ttorch.Tensor(create_storage(dict(nested)))


def space_nbytes(space: Any) -> int:
    """Bytes of one observation of a gymnasium space, every leaf of a ``Dict`` or ``Tuple`` counted (as a
    vector env batches it: a ``Discrete`` is an int64); 0 for a space whose size is unknown (a ``Text``,
    ``Graph`` or ``Sequence``)."""
    subspaces = getattr(space, "spaces", None)
    if isinstance(subspaces, Mapping):
        return sum(space_nbytes(sub) for sub in subspaces.values())
    if isinstance(subspaces, (tuple, list)):
        return sum(space_nbytes(sub) for sub in subspaces)
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if shape is None or dtype is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def space_children(space: Any) -> List[Tuple[str, Any]]:
    """A ``Dict``'s keys or a ``Tuple``'s items ("0", "1", ...: the keys of its tree) with their spaces, in the
    space's own order."""
    if isinstance(space, gym.spaces.Dict):
        return [(str(key), sub) for key, sub in space.spaces.items()]
    return [(str(i), sub) for i, sub in enumerate(space.spaces)]


def space_leaves(space: Any, path: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], Any]]:
    """Every leaf space of a ``Dict``/``Tuple`` space (nested too) with its key path, depth first in the space's
    order (the paths of its observations' trees); ``((), space)`` for any other space."""
    if not _is_structured_space(space):
        yield path, space
        return
    for key, sub in space_children(space):
        yield from space_leaves(sub, path + (key,))


def _is_structured_space(space: Any) -> bool:
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))


# ---- the loop's operations ---------------------------------------------------------------------------------
def to_tensor(value: Any) -> Obs:
    """A vector env's observations (or rewards, flags) as a tensor sharing their memory: numpy arrays through
    ``torch.from_numpy`` (a fifth of ``torch.as_tensor``'s cost, which counts at every step), tensors as they
    are; a dict of them (nested dicts, tuples as keys ``"0"``, ``"1"``, ...: gymnasium's ``Dict`` and
    ``Tuple`` spaces) as a tree of such tensors."""
    if type(value) is np.ndarray:
        return torch.from_numpy(value)
    if _is_nested(value):
        return _make_tree(_tensors(value))
    return torch.as_tensor(value)


def _is_nested(value: Any) -> bool:
    """A gymnasium ``Dict`` or ``Tuple`` observation (a tuple of arrays, not a tuple of numbers)."""
    if isinstance(value, Mapping):
        return True
    return isinstance(value, tuple) and len(value) > 0 and all(
        isinstance(v, (np.ndarray, torch.Tensor, Mapping, tuple)) for v in value)


def _tensors(value: Any) -> Any:
    """Nested mappings of tensors for nested dicts and tuples of arrays (tuple item ``i`` under key ``str(i)``)."""
    if isinstance(value, Mapping):
        return {str(key): _tensors(v) for key, v in value.items()}
    if isinstance(value, tuple):
        return {str(i): _tensors(v) for i, v in enumerate(value)}
    return torch.from_numpy(value) if type(value) is np.ndarray else torch.as_tensor(value)


def index_rows(value: Obs, rows: Any) -> Obs:
    """The rows ``rows`` (an index, a list of indices or a boolean mask) of a per-env value."""
    return value[rows]


def replace_rows(value: Any, rows: Sequence[int], new_rows: Sequence[Any]) -> Any:
    """A copy of a vector env's numpy output whose rows ``rows`` are ``new_rows`` (one per row; ``value``
    itself stays as it was), before ``to_tensor``: the real final observations where episodes ended. For a
    dict (or tuple) observation ``value`` is gymnasium's dict of batched arrays and each new row one env's
    dict, as ``info["final_obs"]`` holds them."""
    if type(value) is np.ndarray:
        value = value.copy()
        for row, new in zip(rows, new_rows):
            value[row] = new
        return value
    if isinstance(value, Mapping):
        return {key: replace_rows(v, rows, [new[key] for new in new_rows]) for key, v in value.items()}
    if isinstance(value, tuple):
        return tuple(replace_rows(v, rows, [new[i] for new in new_rows]) for i, v in enumerate(value))
    return replace_rows(np.asarray(value), rows, new_rows)


def cat_numpy(values: Sequence[Any]) -> Any:
    """Vector envs' numpy outputs (env groups', in env order) as one of all their rows: arrays concatenated,
    a dict (or tuple) observation key by key."""
    first = values[0]
    if isinstance(first, Mapping):
        return {key: cat_numpy([v[key] for v in values]) for key in first}
    if isinstance(first, tuple):
        return tuple(cat_numpy([v[i] for v in values]) for i in range(len(first)))
    return np.concatenate(values)


def stack(values: Sequence[Obs]) -> Obs:
    """Steps ``[E, ...]`` into one ``[T, E, ...]``."""
    values = list(values)
    return ttorch.stack(values) if isinstance(values[0], TreeValue) else torch.stack(values)


def cat(values: Sequence[Obs]) -> Obs:
    """Row blocks (env groups, in env order) into one value of all rows (trees as plain dicts key by key)."""
    values = list(values)
    if isinstance(values[0], TreeValue):
        return ttorch.cat(values)
    if isinstance(values[0], Mapping):
        return {key: cat([v[key] for v in values]) for key in values[0]}
    return torch.cat(values)


def to_device(value: Obs, device: torch.device) -> Obs:
    """``value`` on ``device``; itself where it is there already (without a call into torch: an env step's
    share of time on a CPU)."""
    if isinstance(value, torch.Tensor):  # first: a policy's forward calls this on every step
        return value if value.device == device else value.to(device)
    if isinstance(value, np.ndarray):  # a policy called by hand on an env's own observation
        return torch.as_tensor(value, device=device)
    if not isinstance(value, TreeValue) and _is_nested(value):  # ... or on a dict of its arrays: as the loop makes it
        return to_device(to_tensor(value), device)
    return value if all(leaf.device == device for _, leaf in flatten(value)) else value.to(device)


def all_finite(*values: Obs) -> bool:
    """Whether every float value of ``values`` (tensors or trees) is finite: no NaN, no infinity (integer and bool
    values always are). A host tensor is checked by numpy, which reads it in place (torch's ``isfinite(x).all()``
    dispatches two ops a tensor: about 16 us for an env step's three small tensors against numpy's 5 on the
    development machine, and 5.4 ms against 0.3 ms for a chunk of 8 x 64 images of 84 x 84 floats); device tensors
    by one reduction read back once."""
    from .replay import device as placement  # the one host/device switch (tests run the device path on CPU tensors)

    by_torch = []  # a device's leaves, and bfloat16 (numpy has none)
    for value in values:
        for leaf in (value,) if isinstance(value, torch.Tensor) else (leaf for _, leaf in flatten(value)):
            if not leaf.is_floating_point():
                continue
            if leaf.dtype is not torch.bfloat16 and placement.host_path(leaf.device):
                if not np.isfinite(leaf.numpy(force=leaf.requires_grad or leaf.is_neg() or leaf.is_conj())).all():
                    return False
            else:
                by_torch.append(torch.isfinite(leaf).all())
    if not by_torch:
        return True
    device = by_torch[-1].device  # a device's, where a CPU bfloat16 leaf joins them
    return bool(torch.stack([check.to(device) for check in by_torch]).all())
