"""Contexts: the typed state that middleware share within and across iterations.

Each field is declared as *persistent* (survives ``renew()``: counters, last evaluation) or *per-step*
(reset by ``renew()`` at the end of every iteration: collected data, train output). Attributes a user adds
at run time are per-step unless ``ctx.keep(name)`` marks them persistent for every later renew.

A field that must agree across the ranks of a data-parallel run also declares how (``sync=Sync.SUM``,
``Sync.RANK0``, ...; see ``engine.sync``): the ddp middleware synchronises exactly the declared fields.

Why dataclasses with declared lifetimes: DI-engine's untyped context lets one middleware ``pop`` what
another reads and leaves stale data between iterations; here the lifetime of every field is written down.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from .sync import DISTRIBUTED_DEFAULT_KEY, SYNC_KEY, Sync

__all__ = ["Context", "OnlineRLContext", "OfflineRLContext", "persistent", "per_step", "StopReason", "Sync"]

_LIFETIME = "baton_lifetime"


class StopReason(str, Enum):
    """Why a run stopped (``ctx.stop_reason``). A ``str`` enum: it compares equal to, and is written to
    JSON as, its value (``StopReason.STOP_VALUE == "stop_value"``)."""

    STOP_VALUE = "stop_value"          # the evaluation reached env.stop_value
    MAX_ENV_STEP = "max_env_step"      # the env-step budget
    MAX_TRAIN_ITER = "max_train_iter"  # the update budget
    MAX_STEP = "max_step"              # task.run(max_step=...) ran out of iterations
    FINISHED = "finished"              # a middleware set ctx.finish without naming a reason
    INTERRUPTED = "interrupted"        # KeyboardInterrupt
    PREEMPTED = "preempted"            # SIGTERM or another preempt.signals signal (engine.preemption)
    PLATEAU = "plateau"                # policy.eval.evaluator.patience evaluations in a row without a new best
    ERROR = "error"                    # an exception; ctx.stop_detail holds it

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def _field(lifetime: str, default: Any, default_factory: Any, sync: Any, distributed_default: Any) -> Any:
    metadata: Dict[str, Any] = {_LIFETIME: lifetime}
    if sync is not None:
        metadata[SYNC_KEY] = Sync.parse(sync)  # an unknown rule fails here, when the class is defined
    if distributed_default is not dataclasses.MISSING:
        metadata[DISTRIBUTED_DEFAULT_KEY] = distributed_default
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def persistent(default: Any = None, *, default_factory: Any = dataclasses.MISSING, sync: Any = None,
               distributed_default: Any = dataclasses.MISSING) -> Any:
    """Declare a field that keeps its value across ``renew()``.

    Args:
        sync: how the field agrees across DDP ranks (``engine.sync.Sync``); None: it does not.
        distributed_default: the value a data-parallel run gives the field before the ranks first agree
            (e.g. "do not train yet" for the learner gate).

    Raises:
        ValueError: an unknown ``sync`` rule, naming the valid ones.
    """
    return _field("persistent", default, default_factory, sync, distributed_default)


def per_step(default: Any = None, *, default_factory: Any = dataclasses.MISSING, sync: Any = None) -> Any:
    """Declare a field that ``renew()`` resets to its default at the end of each iteration (``sync`` as
    for ``persistent``)."""
    return _field("per_step", default, default_factory, sync, dataclasses.MISSING)


@dataclass
class Context:
    """Base context: the loop's own counters.

    Attributes:
        total_step: iterations completed by the task loop (persistent).
        finish: set True to stop the loop after the current iteration's backward pass (persistent;
            under DDP rank 0's value).
        stop_reason: why the run stopped, a ``StopReason`` (persistent; under DDP rank 0's value).
        stop_detail: what ended the run when it was an error (persistent).
        preempt: this process received a preemption signal (per step; under DDP true on every rank when
            it is true on any, so all stop in the same iteration: ``middleware.preemption``).
    """

    total_step: int = persistent(0)
    finish: bool = persistent(False, sync=Sync.RANK0)
    stop_reason: Optional[StopReason] = persistent(None, sync=Sync.RANK0)
    stop_detail: Optional[str] = persistent(None)
    preempt: bool = per_step(False, sync=Sync.MAX)

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
        """The persistent fields (declared and kept), as a plain dict for checkpoints (enums as their
        values, so a checkpoint holds no class of ours)."""
        return {name: _plain(getattr(self, name)) for name in sorted(self._kept) if hasattr(self, name)}

    def load_persistent_state(self, state: Dict[str, Any]) -> None:
        """Set the fields of ``persistent_state()``'s dict, each kept from now on, as it was where it was saved
        (a middleware's own ``keep`` field too: a resumed rank 0 hands it on to the other ranks)."""
        for name, value in state.items():
            setattr(self, name, value)
        self.keep(*(name for name in state if name not in self._kept))


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


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

    Persistent: ``env_step`` (env transitions collected; summed over ranks under DDP), ``env_episode``
    (finished episodes; summed), ``episode_return_total`` (the returns of those episodes added up; summed: the
    logger's global mean training return), ``collect_time_total`` (seconds the collectors took; summed over ranks: the
    logger's global collection speed), ``train_iter`` (learner updates), ``last_eval_iter``, ``last_eval_value``,
    ``eval_value`` (latest evaluation return; ``last_eval_value`` holds the same, DI-engine's name),
    ``eval_output`` (latest evaluation details: returns, lengths; the evaluation fields are rank 0's under
    DDP), ``evaluation_record`` (the run summary's count of the evaluations and their best return,
    ``middleware.summary``; rank 0's under DDP, so every rank reports the same), ``learn_gate`` (None in one
    process; under DDP the learner's readiness that all ranks agreed on at the end of the previous iteration,
    and during an iteration this rank's vote for the next).

    Per-step: ``trajectories`` (this iteration's transitions as one batch, ``data.batch``), ``episodes``
    (whole episodes collected this iteration), ``train_data`` (the batch the learner used),
    ``train_output`` (learner statistics: loss, q value, ...), ``collect_kwargs`` (arguments for the
    collect policy, e.g. ``eps``), ``collect_stats`` (this rank's collector counts of the iteration:
    samples, env_steps, episodes, duration), ``episode_returns`` (returns of training episodes finished
    now; in a multi-agent env each is the mean of its agents'), ``agent_episode_returns`` (the same episodes'
    returns per agent, ``[episodes][agents]`` in the env's agent order; None where each env holds one agent),
    ``learner_ready`` (whether this rank's learner had enough data this iteration),
    ``checkpoints_saved`` (the checkpoint files rank 0 wrote this iteration: under DDP every rank then
    writes its replay shard and RNG state beside them).
    """

    env_step: int = persistent(0, sync=Sync.SUM)
    env_episode: int = persistent(0, sync=Sync.SUM)
    episode_return_total: float = persistent(0.0, sync=Sync.SUM)
    collect_time_total: float = persistent(0.0, sync=Sync.SUM)
    train_iter: int = persistent(0)
    last_eval_iter: int = persistent(-1, sync=Sync.RANK0)
    last_eval_value: float = persistent(float("-inf"), sync=Sync.RANK0)
    eval_value: float = persistent(float("-inf"), sync=Sync.RANK0)
    eval_output: Optional[Dict[str, Any]] = persistent(None, sync=Sync.RANK0)
    evaluation_record: Optional[Dict[str, Any]] = persistent(None, sync=Sync.RANK0)
    learn_gate: Optional[bool] = persistent(None, sync=Sync.MIN, distributed_default=False)

    trajectories: Any = per_step(None)
    episodes: Any = per_step(None)
    train_data: Any = per_step(None)
    train_output: Any = per_step(None)
    collect_kwargs: Dict[str, Any] = per_step(default_factory=dict)
    collect_stats: Optional[Dict[str, float]] = per_step(None)
    episode_returns: Optional[List[float]] = per_step(None)
    agent_episode_returns: Optional[List[List[float]]] = per_step(None)
    learner_ready: Optional[bool] = per_step(None)
    checkpoints_saved: Optional[List[str]] = per_step(None, sync=Sync.RANK0)


@dataclass
class OfflineRLContext(Context):
    """State of an offline pipeline: learning from a fixed dataset, with periodic evaluation
    (``pipelines.offline``; docs/offline.md).

    Persistent: ``env_step`` (the dataset transitions the learners have drawn, summed over ranks under
    DDP: offline, the data consumed stands where the env steps collected stand online, so the logs,
    ``progress.csv``, the progress bar and ``--max-env-step`` read it unchanged), ``env_episode`` (0: no env
    episode is collected), ``train_epoch`` (passes over its shard that every rank has completed: the
    minimum over ranks), ``train_iter`` (learner updates, the same on every rank), and the evaluation fields
    and ``evaluation_record`` (rank 0's under DDP) as in ``OnlineRLContext``.

    Per-step: ``train_data`` (the last batch), ``train_output`` (learner statistics), ``checkpoints_saved``
    (rank 0's checkpoint files of this iteration, so every rank writes its RNG state beside them), and,
    always empty offline, ``episode_returns`` and ``collect_kwargs`` (read by the standard logger).
    """

    env_step: int = persistent(0, sync=Sync.SUM)
    env_episode: int = persistent(0)
    train_epoch: int = persistent(0, sync=Sync.MIN)
    train_iter: int = persistent(0)
    last_eval_iter: int = persistent(-1, sync=Sync.RANK0)
    last_eval_value: float = persistent(float("-inf"), sync=Sync.RANK0)
    eval_value: float = persistent(float("-inf"), sync=Sync.RANK0)
    eval_output: Optional[Dict[str, Any]] = persistent(None, sync=Sync.RANK0)
    evaluation_record: Optional[Dict[str, Any]] = persistent(None, sync=Sync.RANK0)

    train_data: Any = per_step(None)
    train_output: Any = per_step(None)
    checkpoints_saved: Optional[List[str]] = per_step(None, sync=Sync.RANK0)
    episode_returns: Optional[List[float]] = per_step(None)
    collect_kwargs: Dict[str, Any] = per_step(default_factory=dict)


_RENEW_PLANS: Dict[type, _RenewPlan] = {}
