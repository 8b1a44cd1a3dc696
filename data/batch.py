"""The batch type: one ``treetensor.torch.Tensor`` per batch, from the collector to the learner.

A batch is a tree of tensors that share their leading dimension (``obs``, ``action``, ``reward``,
``next_obs``, ``terminated``, ``truncated``, ...). The collector builds it once; the replay storage reads its
fields directly; sampling builds one new batch from the gathered slots; GAE adds its fields to the
collected batch in place. Nothing converts it to a dict and back on the way.

The package is DI-treetensor (it imports as ``treetensor``; the unrelated PyPI package named ``treetensor``
is never a dependency). Why ``make_batch`` rather than ``ttorch.Tensor(dict)``: with treevalue 1.5.0 and
torch 2.13 the constructor formats the ``repr`` of every tensor while building (about 3.5 ms for 8 small
tensors); building from a tree storage gives the same object in about 3 us. treevalue also registers itself
with a deprecated torch API and warns on import; that warning is not the user's business, so it is
silenced here, once.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import treetensor.torch as ttorch  # noqa: E402
    from treevalue import TreeValue, flatten, mapping  # noqa: E402,F401 - data.obs takes them from here
    from treevalue.tree.common import create_storage  # noqa: E402

__all__ = ["Batch", "make_batch", "ttorch"]

#: The batch type (``treetensor.torch.Tensor``): fields by attribute (``batch.obs``) or key (``batch["obs"]``).
Batch = ttorch.Tensor


def make_batch(fields: Mapping[str, Any]) -> Batch:
    """A batch over a (possibly nested) mapping of tensors, without copying them.

    Examples:
        >>> import torch
        >>> b = make_batch({"obs": torch.zeros(4, 2), "reward": torch.ones(4)})
        >>> b.obs.shape, sorted(b.keys())
        (torch.Size([4, 2]), ['obs', 'reward'])
        >>> nested = make_batch({"obs": b, "reward": torch.ones(4)})  # a tree field's keys join the batch's
        >>> nested[1:3].obs.obs.shape
        torch.Size([2, 2])
    """
    return ttorch.Tensor(create_storage(_nodes(fields)))


def _nodes(fields: Mapping[str, Any]) -> dict:
    """``fields`` as ``create_storage`` takes them, a field that is a tree (a dictionary observation,
    ``data.obs``) as its storage: given as it is, the tree would be one opaque leaf of the batch, which every
    batch-wide operation (``flatten``, indexing, ``to``) would then apply to as if it were a tensor, and fail."""
    return {key: value._detach() if isinstance(value, TreeValue) else _nodes(value) if isinstance(value, Mapping)
            else value for key, value in fields.items()}
