"""A synchronous event bus.

Why synchronous: a listener's exception must surface at the ``emit`` that caused it, in the order the
listeners were registered, so a failing checkpoint writer or logger is never silently lost in a thread.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List

__all__ = ["EventBus"]

Listener = Callable[..., Any]


class EventBus:
    """Named events with ordered listeners.

    Examples:
        >>> bus = EventBus()
        >>> seen = []
        >>> bus.on("ping", seen.append)
        >>> bus.emit("ping", 1)
        >>> seen
        [1]
    """

    def __init__(self) -> None:
        # Each entry is [listener, once]; a list keeps registration order.
        self._listeners: Dict[str, List[list]] = {}

    def on(self, event: str, fn: Listener) -> None:
        """Call ``fn(*args, **kwargs)`` at every ``emit(event, ...)``."""
        self._add(event, fn, once=False)

    def once(self, event: str, fn: Listener) -> None:
        """Call ``fn`` at the next ``emit(event, ...)`` only."""
        self._add(event, fn, once=True)

    def off(self, event: str, fn: Listener | None = None) -> None:
        """Remove ``fn`` from ``event``, or every listener of ``event`` when ``fn`` is None."""
        if fn is None:
            self._listeners.pop(event, None)
            return
        entries = self._listeners.get(event, [])
        self._listeners[event] = [entry for entry in entries if entry[0] != fn]

    def _add(self, event: str, fn: Listener, once: bool) -> None:
        if not callable(fn):
            raise TypeError(f"event listener for {event!r} must be callable, got {fn!r}")
        self._listeners.setdefault(event, []).append([fn, once])

    def emit(self, event: str, *args: Any, **kwargs: Any) -> None:
        """Call the listeners of ``event`` now, in registration order; exceptions propagate."""
        entries = self._listeners.get(event)
        if not entries:
            return
        if any(entry[1] for entry in entries):
            self._listeners[event] = [entry for entry in entries if not entry[1]]
        for fn, _ in list(entries):
            fn(*args, **kwargs)

    def listeners(self, event: str) -> List[Listener]:
        return [entry[0] for entry in self._listeners.get(event, [])]
