"""Composing middleware: ``serial`` (one after another) and ``parallel`` (side by side on threads).

Both return a single middleware with the same onion semantics as the task loop, so a composed block can be
``use``d, nested, and reused across pipelines.
"""
from __future__ import annotations

import types
from typing import Any, List, Tuple

from .loop import Middleware, finish_generator, middleware_name

__all__ = ["serial", "parallel"]

_GENERATOR = types.GeneratorType


def _check(fns: Tuple[Middleware, ...], who: str) -> None:
    for fn in fns:
        if not callable(fn):
            raise TypeError(f"{who}() wants callable middleware, got {fn!r} of type {type(fn).__name__}")


def serial(*middleware: Middleware) -> Middleware:
    """Run ``middleware`` in order as one middleware: forward parts in order, backward parts reversed.

    Examples:
        >>> order = []
        >>> def a(ctx):
        ...     order.append("a>"); yield; order.append("<a")
        >>> def b(ctx):
        ...     order.append("b")
        >>> block = serial(a, b)
        >>> gen = block(None); next(gen); next(gen, None); order
        ['a>', 'b', '<a']
    """
    _check(middleware, "serial")

    def _serial(ctx: Any):
        suspended: List[Tuple[Middleware, Any]] = []
        try:
            for mw in middleware:
                out = mw(ctx)
                if type(out) is _GENERATOR:
                    next(out)
                    suspended.append((mw, out))
            yield
            while suspended:
                finish_generator(*suspended.pop())
        finally:
            while suspended:
                suspended.pop()[1].close()

    _serial.__qualname__ = "serial(" + ", ".join(middleware_name(m) for m in middleware) + ")"
    return _serial


def parallel(*middleware: Middleware, max_workers: int | None = None) -> Middleware:
    """Run ``middleware`` concurrently on threads as one middleware, and wait for all of them.

    What "parallel" means here: each forward part (a plain function, or a generator up to its ``yield``)
    runs on its own thread of a pool and the block waits for all; after the rest of the pipeline, the
    backward parts run the same way. It pays off when the work releases the GIL (env stepping in C,
    torch ops, I/O); pure-Python middleware gains nothing. The middleware must not write the same ctx
    fields. The first exception raised by any of them propagates.
    """
    _check(middleware, "parallel")
    pool: List[Any] = []

    def _pool() -> Any:
        if not pool:
            from concurrent.futures import ThreadPoolExecutor  # deferred: only parallel() needs threads

            pool.append(ThreadPoolExecutor(max_workers=max_workers or len(middleware),
                                           thread_name_prefix="baton-parallel"))
        return pool[0]

    def _forward(mw: Middleware, ctx: Any) -> Tuple[Middleware, Any]:
        out = mw(ctx)
        if type(out) is _GENERATOR:
            next(out)
            return mw, out
        return mw, None

    def _parallel(ctx: Any):
        executor = _pool()
        futures = [executor.submit(_forward, mw, ctx) for mw in middleware]
        errors = [f.exception() for f in futures]  # waits for every one of them
        suspended = [f.result() for f, e in zip(futures, errors) if e is None]
        suspended = [(mw, gen) for mw, gen in suspended if gen is not None]
        try:
            first_error = next((e for e in errors if e is not None), None)
            if first_error is not None:
                raise first_error
            yield
            backs = [executor.submit(finish_generator, mw, gen) for mw, gen in suspended]
            for f in backs:
                f.result()
            suspended = []
        finally:
            for _, gen in suspended:
                gen.close()

    _parallel.__qualname__ = "parallel(" + ", ".join(middleware_name(m) for m in middleware) + ")"
    return _parallel
