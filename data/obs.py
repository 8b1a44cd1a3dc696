"""What the env loop does with observations, and with the other per-env rows it carries, in a few functions.

The loop (``data.env_loop``) and the collectors never index, join or move an observation themselves: they call
these. Today an observation is one tensor ``[num_envs, *obs_shape]``; a dictionary observation will be a
DI-treetensor tree of such tensors, and only these functions learn about trees (each is one tree operation).

- ``to_tensor``: a vector env's output as a tensor, without a copy (``torch.from_numpy`` for numpy arrays);
- ``index_rows`` / ``replace_rows``: some envs' rows, and a copy of a vector env's numpy output with some rows
  replaced (the real final observations where episodes ended);
- ``stack`` / ``cat``: steps into a time-major ``[T, E, ...]`` chunk; env groups' rows into one step;
- ``to_device``: onto a device (a no-op where it already is);
- ``all_finite``: whether every float value is finite, as a tensor (read it once per collection, not per step).

Examples:
    >>> import numpy as np
    >>> obs = to_tensor(replace_rows(np.zeros((3, 2), np.float32), [1], [np.ones(2)]))
    >>> obs.tolist()
    [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    >>> stack([obs, obs]).shape, cat([obs, obs]).shape, bool(all_finite(obs))
    (torch.Size([2, 3, 2]), torch.Size([6, 2]), True)
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

__all__ = ["to_tensor", "index_rows", "replace_rows", "stack", "cat", "to_device", "all_finite"]


def to_tensor(value: Any) -> torch.Tensor:
    """A vector env's observations (or rewards, flags) as a tensor sharing their memory: numpy arrays through
    ``torch.from_numpy`` (a fifth of ``torch.as_tensor``'s cost, which counts at every step), tensors as they
    are."""
    return torch.from_numpy(value) if type(value) is np.ndarray else torch.as_tensor(value)


def index_rows(value: torch.Tensor, rows: Any) -> torch.Tensor:
    """The rows ``rows`` (an index, a list of indices or a boolean mask) of a per-env value."""
    return value[rows]


def replace_rows(value: np.ndarray, rows: Sequence[int], new_rows: Sequence[Any]) -> np.ndarray:
    """A copy of a vector env's numpy output whose rows ``rows`` are ``new_rows`` (one per row; ``value``
    itself stays as it was), before ``to_tensor``: the real final observations where episodes ended."""
    value = value.copy()
    for row, new in zip(rows, new_rows):
        value[row] = new
    return value


def stack(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """Steps ``[E, ...]`` into one ``[T, E, ...]``."""
    return torch.stack(list(values))


def cat(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """Row blocks (env groups, in env order) into one value of all rows."""
    return torch.cat(list(values))


def to_device(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``value`` on ``device``; itself where it is there already (without a call into torch: an env step's
    share of time on a CPU)."""
    return value if value.device == device else value.to(device)


def all_finite(value: torch.Tensor) -> torch.Tensor:
    """A 0-dim bool tensor: no NaN or infinite value in ``value`` (integer and bool values always are)."""
    if value.is_floating_point():
        return torch.isfinite(value).all()
    return torch.ones((), dtype=torch.bool, device=value.device)
