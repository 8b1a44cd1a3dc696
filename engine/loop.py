"""The task loop: middleware run as an onion, one iteration at a time.

One iteration is:

1. **forward**: each middleware is called with ``ctx`` in registration order. A plain function runs to
   completion; a generator middleware runs up to its single ``yield``.
2. **backward**: the generators started in step 1 are resumed in reverse order and must finish.
3. ``ctx.renew()`` resets the per-step fields.

The loop stops after the backward pass of the iteration in which ``task.finish`` (``ctx.finish``) was set,
or when ``max_step`` iterations have run. However it ends (finish, max_step, an exception or
KeyboardInterrupt), generators still suspended are closed in reverse order and the ``finish`` event is
emitted exactly once per ``run()`` with ``ctx``; an exception then reaches the caller.

``run(profile=StageProfile())`` times every middleware call and resumption (``engine.profile``); without
it the loop reads no clock.
"""
from __future__ import annotations

import logging
import re
import time
import types
from typing import Any, Callable, List, Optional, Tuple

from .context import Context, StopReason
from .events import EventBus
from .profile import StageProfile

__all__ = ["Task", "Middleware", "MiddlewareError", "middleware_name"]

logger = logging.getLogger(__name__)

Middleware = Callable[[Any], Any]
_GENERATOR = types.GeneratorType
_LOCALS = re.compile(r"[\w.]*<locals>\.")  # "test.<locals>.step" is "step" in a profile table


class MiddlewareError(RuntimeError):
    """A middleware broke the protocol (for example a generator that yielded twice)."""


def finish_generator(mw: Middleware, gen: Any) -> None:
    """Resume a generator middleware after its ``yield``; it must finish now.

    Raises:
        MiddlewareError: naming the middleware when it yields a second time.
    """
    try:
        next(gen)
    except StopIteration:
        return
    gen.close()
    raise MiddlewareError(f"middleware {middleware_name(mw)} yielded more than once; "
                          f"a generator middleware must yield exactly once per call")


def middleware_name(mw: Any) -> str:
    """A readable name for error messages: the function or class name."""
    name = getattr(mw, "__qualname__", None) or getattr(mw, "__name__", None)
    return name or type(mw).__name__


class Task:
    """Runs a pipeline of middleware over a shared context.

    Examples:
        >>> from engine import Task, OnlineRLContext
        >>> task = Task()
        >>> def count(ctx):
        ...     ctx.env_step += 1
        >>> with task.start(ctx=OnlineRLContext()):
        ...     task.use(count)
        ...     task.run(max_step=3)
        >>> task.ctx.env_step
        3
    """

    def __init__(self) -> None:
        self._middleware: List[Middleware] = []
        self._names: List[str] = []
        self._events = EventBus()
        self._ctx: Optional[Context] = None
        self._finish_emitted = False

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self, ctx: Optional[Context] = None) -> "Task":
        """Begin a run with ``ctx`` (a fresh ``Context`` when None); usable as a context manager.

        Starting again drops the middleware and listeners of the previous run.
        """
        if ctx is not None and not isinstance(ctx, Context):
            raise TypeError(f"Task.start(ctx=...) wants an engine.context.Context, got {type(ctx).__name__}")
        self._middleware, self._names = [], []
        self._events = EventBus()
        self._ctx = ctx if ctx is not None else Context()
        self._finish_emitted = False
        return self

    def __enter__(self) -> "Task":
        if self._ctx is None:
            self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """End the run: forget middleware and listeners (the loop already emitted ``finish``)."""
        self._middleware, self._names = [], []
        self._events = EventBus()

    @property
    def ctx(self) -> Context:
        if self._ctx is None:
            raise RuntimeError("This task has no context: call task.start(ctx=...) first")
        return self._ctx

    @property
    def finish(self) -> bool:
        """True once a middleware or user asked the loop to stop; backed by ``ctx.finish``."""
        return self._ctx is not None and self._ctx.finish

    @finish.setter
    def finish(self, value: bool) -> None:
        self.ctx.finish = bool(value)

    # ---- composition -----------------------------------------------------------------------------
    def use(self, middleware: Middleware, name: Optional[str] = None) -> "Task":
        """Append a middleware: a function of ``ctx``, or one whose call is a generator that yields once.

        A middleware object with an ``on_finish(ctx)`` method has it subscribed to the ``finish`` event.
        ``name`` labels it in a profile (default: the function or class name).

        Raises:
            TypeError: if ``middleware`` is not callable.
            RuntimeError: if the task was not started.
        """
        if not callable(middleware):
            raise TypeError(f"task.use() wants a callable middleware (a function of ctx), "
                            f"got {middleware!r} of type {type(middleware).__name__}")
        if self._ctx is None:
            raise RuntimeError("task.use() outside a run: call task.start(ctx=...) first")
        self._middleware.append(middleware)
        self._names.append(name or _LOCALS.sub("", middleware_name(middleware)))
        on_finish = getattr(middleware, "on_finish", None)
        if callable(on_finish):
            self._events.on("finish", on_finish)
        return self

    @property
    def middleware(self) -> List[Middleware]:
        return list(self._middleware)

    # ---- events ----------------------------------------------------------------------------------
    def on(self, event: str, fn: Callable[..., Any]) -> None:
        self._events.on(event, fn)

    def once(self, event: str, fn: Callable[..., Any]) -> None:
        self._events.once(event, fn)

    def off(self, event: str, fn: Optional[Callable[..., Any]] = None) -> None:
        self._events.off(event, fn)

    def emit(self, event: str, *args: Any, **kwargs: Any) -> None:
        """Call ``event``'s listeners now; a listener's exception propagates from here."""
        self._events.emit(event, *args, **kwargs)

    # ---- the loop --------------------------------------------------------------------------------
    def run(self, max_step: Optional[int] = None, profile: Optional[StageProfile] = None) -> Context:
        """Iterate until ``task.finish`` is set or ``max_step`` iterations have run; returns ``ctx``.

        With ``profile``, the seconds of every middleware (both halves of a generator) are added to it.
        """
        if self._ctx is None:
            raise RuntimeError("task.run() outside a run: call task.start(ctx=...) or use "
                               "`with task.start(ctx=OnlineRLContext()):` first")
        if max_step is not None and (not isinstance(max_step, int) or max_step < 0):
            raise ValueError(f"max_step must be a non-negative int or None, got {max_step!r}")
        ctx = self._ctx
        self._finish_emitted = False
        middleware = tuple(self._middleware)
        suspended: List[Any] = []
        suspend = suspended.append
        renew = ctx.renew
        steps = 0
        limit = float("inf") if max_step is None else max_step
        try:
            if profile is not None:  # a loop of its own, so that the unprofiled one reads no clock
                _profiled_loop(ctx, middleware, suspended, limit, profile, profile.start(self._names))
            else:
                while not ctx.finish and steps < limit:
                    # forward: registration order; generators stop at their yield
                    for mw in middleware:
                        out = mw(ctx)
                        if type(out) is _GENERATOR:
                            next(out)
                            suspend((mw, out))
                    # backward: reverse order; each generator must finish now
                    while suspended:
                        finish_generator(*suspended.pop())
                    renew()
                    steps += 1
        except BaseException as err:
            _close_all(suspended)
            if ctx.stop_reason is None:
                if isinstance(err, KeyboardInterrupt):
                    ctx.stop_reason = StopReason.INTERRUPTED
                else:
                    ctx.stop_reason, ctx.stop_detail = StopReason.ERROR, repr(err)
            self._emit_finish()
            raise
        self._emit_finish()
        return ctx

    def _emit_finish(self) -> None:
        if self._finish_emitted:
            return
        self._finish_emitted = True
        self._events.emit("finish", self._ctx)


def _profiled_loop(ctx: Context, middleware: Tuple[Middleware, ...], suspended: List[Any], limit: float,
                   profile: StageProfile, seconds: List[float]) -> None:
    """``Task.run``'s loop with a clock reading after every call: each reading closes the interval of the
    stage that just ran and opens the next, so a generator's forward half excludes the stages after it and
    the entries of ``seconds`` (one per middleware, then the loop's own) add up to the wall time."""
    clock = time.perf_counter
    loop_slot = len(middleware)
    slots: List[int] = []  # the index of each suspended generator, popped alongside ``suspended``
    steps = 0
    last = clock()
    while not ctx.finish and steps < limit:
        for i, mw in enumerate(middleware):
            out = mw(ctx)
            if type(out) is _GENERATOR:
                next(out)
                suspended.append((mw, out))
                slots.append(i)
            now = clock()
            seconds[i] += now - last
            last = now
        while suspended:
            finish_generator(*suspended.pop())
            now = clock()
            seconds[slots.pop()] += now - last
            last = now
        ctx.renew()
        steps += 1
        profile.iterations += 1
        now = clock()
        seconds[loop_slot] += now - last
        last = now


def _close_all(suspended: List[Any]) -> None:
    """Close suspended generators in reverse order, so their ``finally`` blocks run."""
    while suspended:
        mw, gen = suspended.pop()
        try:
            gen.close()
        except Exception:  # a broken close must not mask the error that ended the loop
            logger.exception("closing middleware %s failed", middleware_name(mw))
