"""The run assembly: the only package that composes middleware and policies. The standard pipeline of a
config (``build_pipeline``, ``serial_pipeline``) as named, extendable stages. The ``baton`` command and the
options of dizoo scripts (``cli_main``) live a floor above, in ``commands``.

``import pipelines`` is cheap: each name below is imported from its module when first used (PEP 562), so
``baton --help`` loads no torch or gymnasium.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:
    from .pipeline import Pipeline, RunInterrupted, RunPreempted, Stage, StageError
    from .build import build_pipeline, serial_pipeline

__all__ = ["build_pipeline", "serial_pipeline", "Pipeline", "RunInterrupted", "RunPreempted", "Stage", "StageError"]

#: where each public name lives
_HOMES = {"build_pipeline": "build", "serial_pipeline": "build", "Pipeline": "pipeline",
          "RunInterrupted": "pipeline", "RunPreempted": "pipeline", "Stage": "pipeline", "StageError": "pipeline"}
#: names that moved to the command floor: an import of them here names the new spelling
_MOVED = {"cli_main": "commands", "parse_train_args": "commands"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        raise ImportError(f"baton: {name} moved to the command floor: from {_MOVED[name]} import {name}")
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
