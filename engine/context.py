"""Contexts: the typed state that middleware share within and across iterations.

Each field is declared as *persistent* (survives ``renew()``: counters, last evaluation) or *per-step*
(reset by ``renew()`` at the end of every iteration: collected data, train output). Attributes a user adds
at run time are per-step unless ``ctx.keep(name)`` marks them persistent for every later renew.

Why dataclasses with declared lifetimes: DI-engine's untyped context lets one middleware ``pop`` what
another reads and leaves stale data between iterations; here the lifetime of every field is written down.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = ["Context", "OnlineRLContext", "OfflineRLContext", "persistent", "per_step"]

_LIFETIME = "baton_lifetime"


def persistent(default: Any = None, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """Declare a field that keeps its value across ``renew()``."""
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata={_LIFETIME: "persistent"})
    return field(default=default, metadata={_LIFETIME: "persistent"})


def per_step(default: Any = None, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """Declare a field that ``renew()`` resets to its default at the end of each iteration."""
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata={_LIFETIME: "per_step"})
    return field(default=default, metadata={_LIFETIME: "per_step"})


@dataclass
class Context:
    """Base context: the loop's own counters.

    Attributes:
        total_step: iterations completed by the task loop (persistent).
        finish: set True to stop the loop after the current iteration's backward pass (persistent).
        stop_reason: why the run stopped, e.g. ``"stop_value"``, ``"max_env_step"`` (persistent).
    """

    total_step: int = persistent(0)
    finish: bool = persistent(False)
    stop_reason: Optional[str] = persistent(None)

    def __post_init__(self) -> None:
        cls = type(self)
        plan = _RENEW_PLANS.get(cls)
        if plan is None:
            plan = _RENEW_PLANS[cls] = _RenewPlan(cls)
        attrs = self.__dict__
        attrs["_reset_values"] = plan.reset_values  # shared until keep() needs a private copy
        attrs["_factories"] = plan.factories
        attrs["_kept"] = set(plan.persistent_names)
        attrs["_allowed"] = set(plan.known_names)
        attrs["_n_declared"] = len(plan.known_names)

    def keep(self, *names: str) -> None:
        """Make the named fields persist across every later ``renew()``.

        Raises:
            TypeError: if a name is not a string.
        """
        attrs = self.__dict__
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"ctx.keep() takes field names as str, got {name!r}")
            self._kept.add(name)
            self._allowed.add(name)
            if name in attrs["_reset_values"]:
                attrs["_reset_values"] = {k: v for k, v in attrs["_reset_values"].items() if k != name}
            attrs["_factories"] = [(n, f) for n, f in attrs["_factories"] if n != name]

    def renew(self) -> None:
        """Reset per-step fields and drop per-step user attributes; called once at the end of each iteration."""
        attrs = self.__dict__
        attrs.update(attrs["_reset_values"])
        for name, factory in attrs["_factories"]:
            attrs[name] = factory()
        # fast path: exactly the declared fields are present, so there is no user attribute to drop
        if len(attrs) != self._n_declared and not attrs.keys() <= attrs["_allowed"]:
            allowed = attrs["_allowed"]
            for name in [n for n in attrs if n not in allowed]:
                del attrs[name]
        attrs["total_step"] += 1

    def persistent_state(self) -> Dict[str, Any]:
        """The persistent fields (declared and kept), as a plain dict for checkpoints."""
        return {name: getattr(self, name) for name in sorted(self._kept) if hasattr(self, name)}

    def load_persistent_state(self, state: Dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)


class _RenewPlan:
    """Precomputed, per-class facts that make ``renew()`` a handful of C-level dict operations."""

    def __init__(self, cls: type) -> None:
        fields = dataclasses.fields(cls)
        self.persistent_names = [f.name for f in fields if f.metadata.get(_LIFETIME) == "persistent"]
        per_step_fields = [f for f in fields if f.metadata.get(_LIFETIME, "per_step") == "per_step"]
        self.reset_values = {f.name: f.default for f in per_step_fields
                             if f.default_factory is dataclasses.MISSING}
        self.factories = [(f.name, f.default_factory) for f in per_step_fields
                          if f.default_factory is not dataclasses.MISSING]
        self.known_names = frozenset([f.name for f in fields]
                                     + ["_reset_values", "_factories", "_kept", "_allowed", "_n_declared"])


@dataclass
class OnlineRLContext(Context):
    """State of an online (interacting) RL pipeline.

    Persistent: ``env_step`` (env transitions collected, global under DDP), ``env_episode`` (finished
    episodes), ``train_iter`` (learner updates), ``last_eval_iter``, ``last_eval_value``, ``eval_value``
    (latest evaluation return; ``last_eval_value`` holds the same, DI-engine's name), ``eval_output``
    (latest evaluation details: returns, lengths), ``learn_gate`` (None: each learner decides alone
    whether it has enough data; True/False: the decision all DDP ranks agreed on).

    Per-step: ``trajectories`` (this iteration's transitions as a treetensor batch), ``episodes``
    (whole episodes collected this iteration), ``train_data`` (the batch the learner used),
    ``train_output`` (learner statistics: loss, q value, ...), ``collect_kwargs`` (arguments for the
    collect policy, e.g. ``eps``), ``collect_stats`` (this iteration's collector counts: samples,
    env_steps, episodes, duration), ``episode_returns`` (returns of training episodes finished now),
    ``learner_ready`` (whether this rank's learner had enough data this iteration).
    """

    env_step: int = persistent(0)
    env_episode: int = persistent(0)
    train_iter: int = persistent(0)
    last_eval_iter: int = persistent(-1)
    last_eval_value: float = persistent(float("-inf"))
    eval_value: float = persistent(float("-inf"))
    eval_output: Optional[Dict[str, Any]] = persistent(None)
    learn_gate: Optional[bool] = persistent(None)

    trajectories: Any = per_step(None)
    episodes: Any = per_step(None)
    train_data: Any = per_step(None)
    train_output: Any = per_step(None)
    collect_kwargs: Dict[str, Any] = per_step(default_factory=dict)
    collect_stats: Optional[Dict[str, float]] = per_step(None)
    episode_returns: Optional[List[float]] = per_step(None)
    learner_ready: Optional[bool] = per_step(None)


@dataclass
class OfflineRLContext(Context):
    """State of an offline pipeline: learning from a fixed dataset, with periodic evaluation."""

    train_epoch: int = persistent(0)
    train_iter: int = persistent(0)
    last_eval_iter: int = persistent(-1)
    last_eval_value: float = persistent(float("-inf"))
    eval_value: float = persistent(float("-inf"))
    eval_output: Optional[Dict[str, Any]] = persistent(None)

    train_data: Any = per_step(None)
    train_output: Any = per_step(None)


_RENEW_PLANS: Dict[type, _RenewPlan] = {}
