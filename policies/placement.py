"""Where a policy's model lives and what each mode acts with (``policy.device``, ``policy.cuda``).

The learner works on one device. Collection and evaluation act on theirs (``policy.device.collect`` /
``.eval``); a mode given its own device acts through its own copy of the model (modes on one device share
it). A copy is built on the host and moved to its device once, and ``refresh`` copies the learner's weights
into it through host memory, so nothing meant for one GPU passes through another.

A policy composes one ``Placement`` (``policy.placement``) and builds its model through it::

    self.model = self.placement.build(lambda: QNetwork(...))   # on the learner's device
    model = self.placement.actor("collect")                      # what the collect mode acts with

Examples:
    >>> placement = Placement(DeviceParams(collect="cpu"))
    >>> model = placement.build(lambda: torch.nn.Linear(2, 1))
    >>> placement.separate, placement.actor("collect") is model, placement.actor("eval") is model
    (True, False, True)
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch

from engine.params import Params, param

from .noisy import set_noise

__all__ = ["DeviceParams", "Placement", "DeviceGenerators", "PerDevice", "host_state"]

logger = logging.getLogger(__name__)

#: the modes that act, each on its own device or the learner's
ACTING_MODES = ("collect", "eval")


@dataclass
class DeviceParams(Params):
    """A policy's ``device`` section: where it learns and where each acting mode runs (docs/distributed.md,
    "One device setting": under a launcher each rank's device is given, and these are derived)."""

    learn: Optional[str] = param(None)
    """The learner's device, e.g. "cuda:0"; None: the process's device (``policy.cuda=True``: its GPU)."""
    collect: Optional[str] = param(None)
    """e.g. "cpu" or "cuda:1": collection acts through its own copy of the model; None: the learner's model."""
    eval: Optional[str] = param(None)
    """Likewise for evaluation."""
    refresh_every: int = param(1, rule="at_least_one")
    """Iterations between copies of the learner's weights to the acting copies."""


class Placement:
    """The learner's device, each acting mode's device, and the acting copies of the model.

    Args:
        settings: the policy's ``device`` section.
        cuda: ``policy.cuda``: learn on this process's GPU (where ``settings.learn`` names none).
        device: the learner's device, overriding ``policy.device.learn`` and ``policy.cuda`` (the ddp runtime
            passes each rank's device).

    Attributes:
        device: the learner's device (``cuda`` as ``cuda:N``).
        mode_devices: ``{"collect": device, "eval": device}``.
        model: the learner's model (``build``).
        noise: whether noisy layers of acting copies built from now on draw noise (``Policy.set_noise``).
    """

    def __init__(self, settings: DeviceParams, cuda: bool = False, device: Optional[str | torch.device] = None) -> None:
        from engine.devices import parse_device

        learn = settings.learn
        if device is not None:
            self.device = _indexed(torch.device(device))
            if learn is not None and torch.device(parse_device(learn, "policy.device.learn")) != self.device:
                logger.warning("policy.device.learn=%r is ignored: this process learns on %s (its DDP rank's "
                               "device)", learn, self.device)
        elif learn is not None:
            self.device = _indexed(torch.device(parse_device(learn, "policy.device.learn")))
        else:
            self.device = _indexed(_process_device(cuda))
        # a mode given its own device acts through its own copy of the model (even on the learner's device:
        # then refresh_every > 1 acts with weights that lag the learner's, by choice)
        self._copied_modes = {mode for mode in ACTING_MODES if getattr(settings, mode) is not None}
        self.mode_devices: Dict[str, torch.device] = {
            mode: _indexed(torch.device(parse_device(getattr(settings, mode), f"policy.device.{mode}")))
            if mode in self._copied_modes else self.device for mode in ACTING_MODES}
        self.model: torch.nn.Module
        self.noise = True
        self._factory: Optional[Callable[[], torch.nn.Module]] = None
        self._copies: Dict[torch.device, torch.nn.Module] = {}  # acting copies, by device
        self._by_mode: Dict[str, torch.nn.Module] = {}           # the model each acting mode uses

    def build(self, factory: Callable[[], torch.nn.Module]) -> torch.nn.Module:
        """The learner's model, built with ``factory`` on the host and moved to ``device``; acting copies for
        other devices are built with ``factory`` too."""
        self._factory = factory
        self.model = factory().to(self.device)
        return self.model

    @property
    def separate(self) -> bool:
        """Whether collection or evaluation acts through its own copy (``policy.device.collect`` or ``.eval``)."""
        return bool(self._copied_modes)

    def actor(self, mode: str) -> torch.nn.Module:
        """The model ``mode`` ("collect" or "eval") acts with: the learner's own, or a copy on its device."""
        actor = self._by_mode.get(mode)
        if actor is None:
            device = self.mode_devices[mode]
            if mode not in self._copied_modes:
                actor = self.model
            elif device in self._copies:
                actor = self._copies[device]
            else:
                actor = self._factory().requires_grad_(False)  # built on the host ...
                actor.load_state_dict(host_state(self.model))
                set_noise(actor, self.noise)
                actor = self._copies[device] = actor.to(device)  # ... and moved once to its own device
            self._by_mode[mode] = actor
        return actor

    def model_for(self, mode: str) -> torch.nn.Module:
        """The model ``mode`` runs: the learner's for "learn", else ``actor(mode)``."""
        return self.model if mode == "learn" else self.actor(mode)

    def device_for(self, mode: str) -> torch.device:
        """``mode``'s device: the learner's for "learn"."""
        return self.device if mode == "learn" else self.mode_devices[mode]

    @property
    def copies(self) -> List[torch.nn.Module]:
        """The acting copies built so far."""
        return list(self._copies.values())

    def refresh(self) -> None:
        """Copy the learner's weights into the acting copies, through host memory (in place: host acting
        views of their weights stay valid)."""
        if self._copies:
            state = host_state(self.model)
            for actor in self._copies.values():
                actor.load_state_dict(state)


class PerDevice:
    """Values an acting mode needs on the device of its tensors (action bounds, scales), each made once per
    device by ``make(device)``.

    Examples:
        >>> bounds = PerDevice(lambda device: torch.zeros(2, device=device))
        >>> bounds(torch.device("cpu")) is bounds(torch.device("cpu"))
        True
    """

    def __init__(self, make: Callable[[torch.device], Any]) -> None:
        self._make = make
        self._on: Dict[torch.device, Any] = {}

    @classmethod
    def copies(cls, *tensors: torch.Tensor) -> "PerDevice":
        """``tensors`` copied to each device once, as a tuple (e.g. an action scale and bias)."""
        return cls(lambda device: tuple(t.to(device) for t in tensors))

    def __call__(self, device: torch.device) -> Any:
        value = self._on.get(device)
        if value is None:
            value = self._on[device] = self._make(device)
        return value


class DeviceGenerators:
    """A torch generator per device for a policy's own random draws (exploration), on the device it acts on,
    each seeded once from ``rng``; by default ``rng`` is seeded from torch's RNG, so ``torch.manual_seed``
    keeps collection reproducible.

    Examples:
        >>> generators = DeviceGenerators(np.random.default_rng(0))
        >>> generators.on(torch.device("cpu")) is generators.on(torch.device("cpu"))
        True
    """

    def __init__(self, rng: Optional[np.random.Generator] = None) -> None:
        if rng is None:
            rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, ()).item()))
        #: ``on(device)``: the generator of ``device``
        self.on = PerDevice(lambda device: torch.Generator(device).manual_seed(int(rng.integers(0, 2**62))))


def host_state(model: torch.nn.Module, copy: bool = False) -> Dict[str, torch.Tensor]:
    """The model's state on the host; ``copy``: always new tensors (else a CPU model's own are returned)."""
    return {k: v.detach().to("cpu", copy=copy) for k, v in model.state_dict().items()}


def _indexed(device: torch.device) -> torch.device:
    """``cuda`` as ``cuda:N`` (the current GPU): tensors report an index, and the device check compares."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _process_device(cuda: bool) -> torch.device:
    if cuda:
        if torch.cuda.is_available():
            return torch.device("cuda")
        logger.warning("policy.cuda=True but CUDA is not available: running on the CPU")
    return torch.device("cpu")
