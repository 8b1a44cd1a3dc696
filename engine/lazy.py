"""Packages whose public names load on first use (PEP 562), so that importing the package stays cheap:
``import pipelines`` or ``import commands`` loads no torch, and ``baton --help`` answers at once."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, List, Mapping, Optional, Tuple

__all__ = ["lazy_exports", "moved_names"]


def moved_names(package: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module's ``__getattr__`` for names that are gone: an import of one raises an ``ImportError`` whose one
    ``baton:`` line is its entry of ``moved`` (naming the new spelling); any other name is an ``AttributeError``."""
    moved = dict(moved)

    def __getattr__(name: str) -> Any:
        if name in moved:
            raise ImportError(f"baton: {moved[name]}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def lazy_exports(package: str, homes: Mapping[str, str], moved: Optional[Mapping[str, str]] = None
                 ) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package: the package's ``__name__``.
        homes: public name -> the module of the package (relative, without the dot) that defines it.
        moved: names that are gone -> the line an import of them raises (``moved_names``).
    """
    gone = moved_names(package, moved or {})

    def __getattr__(name: str) -> Any:
        if name not in homes:
            return gone(name)
        value = getattr(importlib.import_module(f".{homes[name]}", package), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain one
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
