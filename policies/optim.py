"""An update's optimizer step: the loss checked, backward, the gradient norm clipped, the step, the count.

A policy composes one ``OptimizerStep`` (``policy.optimizer_step``) over its parameter groups, with the
config's settings per group, and calls ``step(loss)`` once per update, or once per loss where an update has
several (SAC steps its critics, then its actor and temperature; TD3 its critics, then on an actor step its actor;
each step holds the other groups out, and every step but the update's last has ``count=False``)::

    self.optimizer_step = OptimizerStep.adam([critic_params, actor_params], self.optimizer_settings(), "TD3")
    ...
    self.optimizer_step.step(loss)

The loss check: on the host, a non-finite loss raises ``NonFiniteLossError`` before the step
(``policies.checks.check_finite``). On a GPU it does not wait for the device (a read of the loss would
stall every update): the flag stays on the device and tells the fused Adam to skip the step (its
``found_inf``, as ``torch.amp.GradScaler`` uses it: parameters, moments and step count unchanged), and the
error is raised at a later update, as soon as the host sees the device has computed it, without waiting
for it (``data.replay.device.DeferredCheck``).
An optimizer that is not fused is checked at once, with the wait.

The settings (``lr``, ``weight_decay``) are applied again over a checkpoint's when one is loaded, so that a
resume runs with the config in force (a changed learning rate takes effect).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

import torch

from data.replay.device import DeferredCheck, host_path

from .checks import NonFiniteLossError, check_finite

__all__ = ["OptimizerStep", "make_adam", "zero_for_ddp"]

#: an optimizer's group keys that say how it steps, not what: a loaded checkpoint's are not taken
_IMPLEMENTATION_KEYS = ("fused", "foreach", "capturable", "differentiable")


class OptimizerStep:
    """An optimizer, its update count and the loss check before each step (module docstring).

    Args:
        optimizer: over the policy's parameters (``make_adam``).
        settings: the config's settings per parameter group, in the groups' order (applied again on load).
        label: the algorithm's name in the non-finite-loss error, e.g. ``"SAC"``.

    Attributes:
        optimizer: as given.
        updates: the updates taken (checkpointed as ``updates``): the steps, less those with ``count=False``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, settings: Sequence[Mapping[str, float]], label: str) -> None:
        self.optimizer = optimizer
        self.settings = [dict(s) for s in settings]
        self.label = label
        self.updates = 0
        self._params = [p for group in optimizer.param_groups for p in group["params"]]
        self._deferred: Optional[DeferredCheck] = None  # the loss check off the host
        self._found_inf: Optional[torch.Tensor] = None   # graph_step's skip flag, one tensor for every replay
        self._flushers: List[Callable[[], None]] = []     # deferred checks of captured updates (``watch``)

    @classmethod
    def adam(cls, groups: Sequence[Iterable[torch.nn.Parameter]], settings: Sequence[Mapping[str, float]], label: str,
             **kwargs: Any) -> "OptimizerStep":
        """Over ``make_adam``: one parameter group per setting (``zip``: groups beyond the settings are left
        out), or with one of each, the settings as the Adam's own."""
        if len(groups) == 1 and len(settings) == 1:
            return cls(make_adam(groups[0], **kwargs, **settings[0]), settings, label)
        return cls(make_adam([dict(s, params=g) for g, s in zip(groups, settings)], **kwargs), settings, label)

    def step(self, loss: torch.Tensor, grad_clip: float = 0.0, hold: Sequence[torch.nn.Parameter] = (),
             count: bool = True) -> None:
        """The loss checked, backward, the gradient norm clipped to ``grad_clip`` (> 0), the step and the count.

        Args:
            hold: parameters kept out of this step (TD3's actor in its critics' step): their gradients are
                taken off for the step and given back after (under DDP the backward did reach them).
            count: False for a step that is not its update's last (TD3's critics' step before its actor's), so
                that ``updates`` counts updates and both steps' loss checks name the same one.

        Raises:
            NonFiniteLossError: a non-finite loss (module docstring: on a GPU, at a later update).
        """
        self._check_loss(loss)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self._params, grad_clip)
        self._held_step(hold)
        self.updates += int(count)

    def _held_step(self, hold: Sequence[torch.nn.Parameter]) -> None:
        """The optimizer's step with ``hold``'s gradients taken off for it and given back after."""
        if not hold:
            self.optimizer.step()
            return
        grads = [p.grad for p in hold]
        for p in hold:
            p.grad = None
        self.optimizer.step()
        for p, grad in zip(hold, grads):
            p.grad = grad

    def graph_step(self, loss: torch.Tensor, grad_clip: float = 0.0,
                   hold: Sequence[torch.nn.Parameter] = ()) -> torch.Tensor:
        """``step`` (``hold`` too) with nothing read on the host, for a captured update (``policies.update_graph``): a
        non-finite loss makes a fused Adam skip the step (its ``found_inf``) and is returned as a 0-d bool for
        the caller to report; the update count is the caller's to add after the graph's replay.

        Why the found-inf flag is one kept tensor: a CUDA graph binds the memory it was captured over, so each
        replay writes the flag where the captured step reads it."""
        bad = ~torch.isfinite(loss.detach())
        fused = bool(self.optimizer.defaults.get("fused"))  # only the fused Adam takes a found-inf flag
        if fused and self._found_inf is None:
            self._found_inf = torch.zeros((), device=loss.device)
        if fused:
            self._found_inf.copy_(bad)
        before = getattr(self.optimizer, "found_inf", None)
        self.optimizer.found_inf = self._found_inf if fused else None
        self.optimizer.zero_grad(set_to_none=True)  # at capture: the backward allocates the grads in the graph's pool
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self._params, grad_clip)
        self._held_step(hold)
        self.optimizer.found_inf = before
        return bad

    def make_capturable(self) -> None:
        """Let a CUDA graph capture this optimizer's step (``capturable``; a load keeps it). Its note that a
        capturable step runs uncaptured (the warm-up calls before a capture) is not wanted here."""
        for group in self.optimizer.param_groups:
            group["capturable"] = True
        self.optimizer._warned_capturable_if_run_uncaptured = True

    def bound_tensors(self) -> list:
        """The optimizer's state tensors (a captured update binds their memory; a checkpoint's load replaces them)."""
        return [t for state in self.optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)]

    def _check_loss(self, loss: torch.Tensor) -> None:
        if host_path(loss.device) or not self.optimizer.defaults.get("fused"):
            check_finite(loss, self.label, self.updates)
            return
        if self._deferred is None:
            self._deferred = DeferredCheck(loss.device, NonFiniteLossError)
        bad = ~torch.isfinite(loss.detach())
        self._deferred.report(bad, f"{self.label} loss is not finite (NaN or inf) at update {self.updates}, seen "
                                   f"on {loss.device} at a later update; that loss's step was skipped, so the "
                                   f"parameters it moves are left at their last finite values. Lower "
                                   f"policy.learn.learning_rate or clip gradients")
        self.optimizer.found_inf = bad.float()

    def watch(self, flush: Callable[[], None]) -> None:
        """Call ``flush`` (a captured update's deferred checks) before each ``state_dict``."""
        self._flushers.append(flush)

    def state_dict(self) -> Dict[str, Any]:
        """``optimizer`` and ``updates``, the keys of a policy's state. A non-finite loss the device flagged and
        the host has not read yet is raised first (a checkpoint is written after every update it holds)."""
        if self._deferred is not None:
            self._deferred.flush()
        for flush in self._flushers:
            flush()
        return dict(optimizer=self.optimizer.state_dict(), updates=self.updates)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The optimizer's state under the config's settings, and the update count."""
        # a checkpoint's groups carry how the saving run stepped (fused, foreach, capturable): this run's stay
        kept = [{k: group.get(k) for k in _IMPLEMENTATION_KEYS} for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(state["optimizer"])
        for group, settings, implementation in zip(self.optimizer.param_groups, self.settings, kept):
            group.update(settings)
            group.update(implementation)
            _place_steps(self.optimizer, group)
        self.updates = int(state["updates"])


def _place_steps(optimizer: torch.optim.Optimizer, group: Dict[str, Any]) -> None:
    """Each parameter's ``step`` where ``group``'s implementation keeps it: on the parameter's device for a fused
    or capturable Adam, else on the host (torch places it by the checkpoint's groups, which may be another's)."""
    on_device = bool(group.get("fused") or group.get("capturable"))
    for p in group["params"]:
        state = optimizer.state.get(p)
        step = state.get("step") if state else None
        if isinstance(step, torch.Tensor):
            state["step"] = step.to(p.device if on_device else "cpu", torch.float32)


def zero_for_ddp(learn_model: torch.nn.Module, params: Sequence[torch.nn.Parameter]) -> Any:
    """Under DDP, ``0 * sum(params)``; else 0. A loss that does not use ``params`` (TD3's and SAC's critics' pass
    leaves the actor out, their actor's pass the critics) plus this gives them a zero gradient, without their
    forward: DDP's backward waits for every parameter's. 0 where DDP finds unused parameters itself
    (``find_unused_parameters``: it refuses a gradient for a parameter it marked unused)."""
    if isinstance(learn_model, torch.nn.parallel.DistributedDataParallel) and not learn_model.find_unused_parameters:
        return 0.0 * sum(p.sum() for p in params)
    return 0.0


def make_adam(params: Any, **kwargs: Any) -> torch.optim.Optimizer:
    """Adam, fused where this torch supports it (CPU fused Adam since torch 2.4: ~20% faster updates for
    small networks, where per-parameter Python loops dominate). ``params``: parameters, or parameter groups
    (dicts with ``params``)."""
    params = [dict(p, params=list(p["params"])) if isinstance(p, dict) else p for p in params]
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.Adam(params, foreach=True, **kwargs)
