"""A pipeline you can see and extend: an ordered list of named stages over one context.

``build_pipeline(cfg)`` returns the standard pipeline of a config as a ``Pipeline``; before ``run()`` a
user inserts, replaces or removes stages by name::

    pipeline = build_pipeline((main_config, create_config))
    pipeline.insert_after("learner", my_middleware, name="my_stage")
    summary = pipeline.run()

Stages marked ``main_only`` (evaluation, checkpoints, logging) run on global rank 0 alone; they keep their
place in the list on every rank, so ``insert_after("evaluator", ...)`` means the same on all ranks.
"""
from __future__ import annotations

import contextlib
import difflib
import signal
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from engine.context import Context, StopReason
from engine.loop import Middleware, Task
from engine.preemption import Preempted, exit_code
from engine.profile import StageProfile

__all__ = ["Pipeline", "RunInterrupted", "RunPreempted", "Stage", "StageError"]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) ended the run. Still a ``KeyboardInterrupt``, so a script or a sweep stops as it
    would; it carries the run's summary (``stop_reason`` ``interrupted``, the counters, ``run_dir``) for the
    message. The checkpoint stage wrote ``latest`` at finish, so the run continues with ``--resume``."""

    def __init__(self, summary: Any) -> None:
        KeyboardInterrupt.__init__(self, "run interrupted")  # not super(): RunPreempted puts Preempted next
        self.summary = summary


class RunPreempted(RunInterrupted, Preempted):
    """A preemption signal (SIGTERM, SIGUSR1: ``preempt.signals``) ended the run at an iteration boundary,
    after ``latest`` was written (``engine.preemption``). ``signal`` names it; ``exit_code`` is what the
    process exits with (128 + its number: SIGTERM 143, SIGUSR1 138). A ``RunInterrupted``, so code that
    handles Ctrl-C handles this too."""

    def __init__(self, summary: Any, signal_name: str, code: int) -> None:
        RunInterrupted.__init__(self, summary)
        self.args = (f"run preempted by {signal_name}",)
        self.signal = signal_name
        self.exit_code = code


class StageError(KeyError):
    """A stage name that does not exist, or one that is already taken; the message lists the stages."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


@dataclass
class Stage:
    """One named middleware of a pipeline.

    Attributes:
        name: unique within the pipeline; what ``insert_after`` and friends refer to.
        middleware: a function of ``ctx`` or a generator middleware; None where the stage does not run
            on this rank (a ``main_only`` stage on a rank other than 0).
        main_only: run on global rank 0 only.
    """

    name: str
    middleware: Optional[Middleware]
    main_only: bool = False


class Pipeline:
    """Named stages run by a ``Task`` over ``ctx``.

    Args:
        ctx: the context the stages share (an ``OnlineRLContext`` or a subclass of it, for the standard one).
        rank: this process's global rank; ``main_only`` stages run where it is 0.
        result: called after the run, its value is what ``run()`` returns (the standard pipeline's summary).
        resources: a ``contextlib.ExitStack`` closed when the run ends (envs, the process group).
        cfg, policy, buffer: what ``build_pipeline`` compiled and built (the compiled config, the policy,
            the replay buffer or None), for middleware of your own that need them.
        profile: None, or a ``StageProfile`` that ``run()`` fills with each stage's time (``log.profile``).
        built: more of what a pipeline shape built, kept as attributes of the same names (the offline
            shape's ``dataset`` and ``shard``).

    Attributes:
        ctx, cfg, policy, buffer, profile: as given.
    """

    def __init__(self, ctx: Context, *, rank: int = 0, result: Optional[Callable[[], Any]] = None,
                 resources: Optional[contextlib.ExitStack] = None, cfg: Any = None, policy: Any = None,
                 buffer: Any = None, profile: Optional[StageProfile] = None, **built: Any) -> None:
        self.ctx = ctx
        self.rank = rank
        self.cfg = cfg
        self.policy = policy
        self.buffer = buffer
        self.profile = profile
        for name, value in built.items():
            setattr(self, name, value)
        self._stages: List[Stage] = []
        self._result = result
        self._resources = resources or contextlib.ExitStack()
        self._closed = False

    # ---- what is in it -----------------------------------------------------------------------------
    @property
    def names(self) -> List[str]:
        """The stage names, in the order they run."""
        return [s.name for s in self._stages]

    @property
    def stages(self) -> List[Stage]:
        return list(self._stages)

    def __getitem__(self, name: str) -> Optional[Middleware]:
        """The middleware of stage ``name`` (None where it does not run on this rank)."""
        return self._stages[self._index(name)].middleware

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def __repr__(self) -> str:
        return f"Pipeline({' -> '.join(self.names)})"

    # ---- changing it -------------------------------------------------------------------------------
    def append(self, middleware: Optional[Middleware], *, name: Optional[str] = None,
               main_only: bool = False) -> "Pipeline":
        """Add a stage at the end. (On a rank other than 0 a ``main_only`` stage's middleware may be None: it
        never runs there.)"""
        self._insert(len(self._stages), middleware, name, main_only)
        return self

    def insert_before(self, stage: str, middleware: Middleware, *, name: Optional[str] = None,
                      main_only: bool = False) -> "Pipeline":
        """Add a stage right before ``stage``."""
        self._insert(self._index(stage), middleware, name, main_only)
        return self

    def insert_after(self, stage: str, middleware: Middleware, *, name: Optional[str] = None,
                     main_only: bool = False) -> "Pipeline":
        """Add a stage right after ``stage``."""
        self._insert(self._index(stage) + 1, middleware, name, main_only)
        return self

    def replace(self, stage: str, middleware: Middleware) -> "Pipeline":
        """Put ``middleware`` in place of stage ``stage`` (same name, same ``main_only``)."""
        i = self._index(stage)
        self._check_callable(middleware, stage)
        old = self._stages[i]
        self._stages[i] = Stage(old.name, middleware if (not old.main_only or self.rank == 0) else None,
                                old.main_only)
        return self

    def remove(self, stage: str) -> "Pipeline":
        del self._stages[self._index(stage)]
        return self

    # ---- running it --------------------------------------------------------------------------------
    def run(self, max_step: Optional[int] = None) -> Any:
        """Run the stages until the context finishes (or ``max_step`` iterations), then release the
        pipeline's resources; returns the run summary (or ``ctx`` for a pipeline without one)."""
        if self._closed:
            raise RuntimeError("this pipeline has run already (its envs are closed): to train on, build one on the "
                               "same run, build_pipeline(cfg, max_env_step=LARGER, exp_name=summary['run_dir'], "
                               "resume=True) (docs/middleware.md)")
        try:
            task = Task()
            with task.start(ctx=self.ctx):
                for stage in self._stages:
                    if stage.middleware is not None:
                        task.use(stage.middleware, name=stage.name)
                task.run(max_step=max_step, profile=self.profile)
            result = self._result() if self._result is not None else self.ctx
        except KeyboardInterrupt as err:
            self.close(err)
            if self._result is None or isinstance(err, RunInterrupted):
                raise
            if isinstance(err, Preempted):  # a command's signal scope (engine.preemption.stop_signals) before the guard
                raise RunPreempted(self._result(), err.signal, err.exit_code) from err
            raise RunInterrupted(self._result()) from err
        except BaseException as err:
            self.close(err)
            raise
        self.close()
        preempted = self._preempted()  # after close: a signal in the last iteration or the final write counts
        if preempted is not None:
            raise preempted
        return result

    def _preempted(self) -> Optional[RunPreempted]:
        """The ``RunPreempted`` to raise when the preemption stage ended the run, or when a signal came as the
        run was finishing anyway (its last iteration, the final checkpoint, the close): the process was asked
        to stop, so a script or a sweep must not go on to its next run. None otherwise."""
        stage = self["preemption"] if "preemption" in self else None
        if stage is None or (getattr(self.ctx, "stop_reason", None) != StopReason.PREEMPTED
                             and stage.guard.requested is None):
            return None
        guard = stage.guard
        signum = guard.signum or guard.default_signum
        return RunPreempted(self._result() if self._result is not None else self.ctx,
                            signal.Signals(signum).name, exit_code(signum))

    def close(self, error: Optional[BaseException] = None) -> None:
        """Release envs and the process group without running (``run()`` does this itself). ``error``: what
        ended the run, told to the resources as ``with`` would tell them, so the process group is left
        without the final barrier that peers which failed would never reach (and that would hide the
        error behind a collective mismatch)."""
        if not self._closed:
            self._closed = True
            if error is None:
                self._resources.close()
            else:
                self._resources.__exit__(type(error), error, error.__traceback__)

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, exc_type: Any, error: Optional[BaseException], traceback: Any) -> None:
        self.close(error)

    # ---- helpers -----------------------------------------------------------------------------------
    def _insert(self, index: int, middleware: Optional[Middleware], name: Optional[str], main_only: bool) -> None:
        name = name or _default_name(middleware)
        runs_here = not main_only or self.rank == 0
        if runs_here or middleware is not None:
            self._check_callable(middleware, name)
        if name in self.names:
            raise StageError(f"a stage named {name!r} exists already; pass name=... to insert_after/"
                             f"insert_before/append. Stages: {', '.join(self.names)}")
        self._stages.insert(index, Stage(name, middleware if runs_here else None, main_only))

    def _check_callable(self, middleware: Any, name: str) -> None:
        if not callable(middleware):
            raise TypeError(f"stage {name!r}: a middleware must be callable (a function of ctx, or a generator "
                            f"function that yields once), got {middleware!r} of type {type(middleware).__name__}. "
                            f"Stages: {', '.join(self.names)}")

    def _index(self, name: str) -> int:
        for i, stage in enumerate(self._stages):
            if stage.name == name:
                return i
        close = difflib.get_close_matches(str(name), self.names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise StageError(f"no stage named {name!r} in this pipeline.{hint} Stages: {', '.join(self.names)}")


def _default_name(middleware: Any) -> str:
    name = getattr(middleware, "__name__", None) or type(middleware).__name__
    return name.strip("_<>") or "stage"

