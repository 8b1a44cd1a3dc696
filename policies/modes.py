"""A policy's three modes: what middleware may use of it (the contracts of ``engine.protocols``).

Each mode's ``forward`` is the policy's own ``_forward_*`` method, wrapped only where a switch asks: the
collect forward observes its observations (``policy.obs_norm``), a forward is watched for its hot paths
(``policy.compile`` / ``policy.amp``), and checked for devices (``policy.check_device``). With every switch
off, ``learn_mode.forward`` is the bound method itself.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

import torch

from .checks import device_checked

if TYPE_CHECKING:
    from .base import Policy

__all__ = ["LearnMode", "CollectMode", "EvalMode"]


def _wrapped(policy: "Policy", mode: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` watched for hot paths, and checked for devices, as the config asks."""
    fn = policy.hot_paths.watched(mode, fn)
    return device_checked(fn, mode, policy.placement) if policy.check_device else fn


class LearnMode:
    """What a learner middleware may use of a policy (``engine.protocols.LearnPolicy``)."""

    def __init__(self, policy: "Policy") -> None:
        self.policy = policy
        self.forward: Callable[[Any], Dict[str, Any]] = _wrapped(policy, "learn", policy._forward_learn)
        self.state_dict = policy.state_dict
        self.load_state_dict = policy.load_state_dict
        self.cfg = policy.cfg
        self.graphed_updates = policy.graphed_updates  # policy.compile='cudagraph_update' (policies.update_graph)
        end_epoch = getattr(policy, "end_epoch", None)
        if end_epoch is not None:  # an on-policy learner calls it after each epoch (PPO's adaptive learning rate)
            self.end_epoch: Callable[[], None] = end_epoch

    @property
    def model(self) -> torch.nn.Module:
        """The module that takes gradients; assign a wrapper (e.g. DDP) to train through it."""
        return self.policy.learn_model

    @model.setter
    def model(self, module: torch.nn.Module) -> None:
        self.policy.learn_model = module

    @property
    def device(self) -> torch.device:
        return self.policy.device


class CollectMode:
    """What a collector (and the GAE estimator) may use (``engine.protocols.CollectPolicy``):
    ``forward(obs, **collect_kwargs)`` and, for actor-critic policies, ``value(obs)`` (None for value-free
    ones)."""

    def __init__(self, policy: "Policy") -> None:
        self.policy = policy
        self.forward: Callable[..., Dict[str, Any]] = _wrapped(
            policy, "collect", policy.normalisation.observing(policy._forward_collect))
        value = getattr(policy, "_value", None)
        self.value: Optional[Callable[..., Any]] = None
        if value is not None:
            self.value = device_checked(value, "collect", policy.placement) if policy.check_device else value
        self.initial_state: Optional[Callable[[int], torch.Tensor]] = policy.initial_state_on("collect")
        self.cfg = policy.cfg

    @property
    def device(self) -> torch.device:
        return self.policy.mode_devices["collect"]


class EvalMode:
    """What an evaluator may use (``engine.protocols.EvalPolicy``): ``forward(obs)``."""

    def __init__(self, policy: "Policy") -> None:
        self.policy = policy
        self.forward: Callable[..., Dict[str, Any]] = _wrapped(policy, "eval", policy._forward_eval)
        self.initial_state: Optional[Callable[[int], torch.Tensor]] = policy.initial_state_on("eval")
        self.cfg = policy.cfg

    @property
    def device(self) -> torch.device:
        return self.policy.mode_devices["eval"]
