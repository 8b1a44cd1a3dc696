"""Packages whose public names load on first use (PEP 562), so that importing the package stays cheap:
``import pipelines`` or ``import commands`` loads no torch, and ``baton --help`` answers at once."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, List, Mapping, Optional, Tuple

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str], moved: Optional[Mapping[str, str]] = None
                 ) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package: the package's ``__name__``.
        homes: public name -> the module of the package (relative, without the dot) that defines it.
        moved: names that now live in another package -> that package: an import of them here raises an
            ``ImportError`` whose one line names the new spelling.
    """
    moved = dict(moved or {})

    def __getattr__(name: str) -> Any:
        if name in moved:
            raise ImportError(f"baton: {name} moved to the command floor: from {moved[name]} import {name}")
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{homes[name]}", package), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain one
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
