"""The checks a policy runs around its modes and updates, and the errors they raise.

- ``device_checked``: ``policy.check_device=True`` wraps each mode's forward in a check of every tensor in its
  arguments, its model and its result against the mode's device (debugging; off, the forward is not wrapped).
- ``check_finite``: a NaN or inf loss raises ``NonFiniteLossError`` before the optimizer step, so the
  parameters stay the last good ones (``policies.optim.OptimizerStep`` runs it, or its deferred form on a GPU).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .placement import Placement

__all__ = ["NonFiniteLossError", "DeviceMismatchError", "check_finite", "device_checked"]


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or inf; raised before the optimizer step, so parameters stay the last good ones."""


class DeviceMismatchError(RuntimeError):
    """A tensor on another device than the policy mode declares (``policy.check_device=True``)."""


def check_finite(loss: torch.Tensor, algo: str, update: int) -> None:
    """Raise NonFiniteLossError before the optimizer step, so the parameters stay the last good ones."""
    if not torch.isfinite(loss):
        raise NonFiniteLossError(f"{algo} loss is {loss.item()} at update {update}; the parameters are left at "
                                 f"their last finite values. Lower policy.learn.learning_rate or clip gradients")


def device_checked(fn: Callable[..., Any], mode: str, placement: Placement) -> Callable[..., Any]:
    """``fn`` wrapped in a check of every tensor in its arguments, the model of ``mode`` and its result
    against ``mode``'s device (``placement``).

    Raises (from the wrapper):
        DeviceMismatchError: naming the mode, the argument or parameter, its device and the expected one.
    """
    name = getattr(fn, "__name__", mode).lstrip("_")

    def checked(*args: Any, **kwargs: Any) -> Any:
        device = placement.device_for(mode)
        model = placement.model_for(mode)
        allowed = {torch.device("cpu"), device}  # host tensors are moved by the mode itself
        for i, arg in enumerate(args):
            check_tensors(f"{mode}_mode.{name} input {i}", arg, allowed, device)
        for key, arg in kwargs.items():
            check_tensors(f"{mode}_mode.{name} input {key}", arg, allowed, device)
        for pname, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            if tensor.device != device:
                raise DeviceMismatchError(f"{mode}_mode model tensor {pname!r} is on {tensor.device}, "
                                          f"expected {device} (policy.device.{mode})")
        out = fn(*args, **kwargs)
        check_tensors(f"{mode}_mode.{name} output", out, allowed, device)
        return out

    return checked


def check_tensors(where: str, value: Any, allowed: set, device: torch.device, path: str = "") -> None:
    """Every tensor inside ``value`` (tensors, dicts, batches, lists) must be on a device in ``allowed``."""
    if isinstance(value, torch.Tensor):
        if value.device not in allowed:
            raise DeviceMismatchError(f"{where}{path or ''}: tensor is on {value.device}, expected {device} (or "
                                      f"cpu, which the mode moves itself)")
    elif hasattr(value, "items"):
        for key, item in value.items():
            check_tensors(where, item, allowed, device, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_tensors(where, item, allowed, device, f"{path}[{i}]")
