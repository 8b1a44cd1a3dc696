"""The top floor: the only package that composes middleware and policies. The standard pipeline of a
config (``build_pipeline``, ``serial_pipeline``), the ``baton`` command (``python -m pipelines``), and the
options shared by ``baton train`` and every dizoo config run as a script (``cli_main``).

``import pipelines`` is cheap: each name below is imported from its module when first used (PEP 562), so
``baton --help`` and the other answers of ``pipelines.cli`` that train nothing load no torch or gymnasium.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:
    from .options import cli_main, parse_train_args
    from .pipeline import Pipeline, RunInterrupted, RunPreempted, Stage, StageError
    from .build import build_pipeline, serial_pipeline

__all__ = ["build_pipeline", "serial_pipeline", "Pipeline", "RunInterrupted", "RunPreempted", "Stage", "StageError",
           "cli_main", "parse_train_args"]

#: where each public name lives
_HOMES = {"build_pipeline": "build", "serial_pipeline": "build", "Pipeline": "pipeline",
          "RunInterrupted": "pipeline", "RunPreempted": "pipeline", "Stage": "pipeline", "StageError": "pipeline",
          "cli_main": "options", "parse_train_args": "options"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
