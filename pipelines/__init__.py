"""The run assembly: the only package that composes middleware and policies. The standard pipeline of a
config (``build_pipeline``, ``serial_pipeline``) as named, extendable stages. The ``baton`` command and the
options of dizoo scripts (``cli_main``) live a floor above, in ``commands``.

``import pipelines`` is cheap: each name below is imported from its module when first used (PEP 562), so
``baton --help`` loads no torch or gymnasium.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lazy import lazy_exports

if TYPE_CHECKING:
    from .pipeline import Pipeline, RunInterrupted, RunPreempted, Stage, StageError
    from .build import build_pipeline, serial_pipeline

__all__ = ["build_pipeline", "serial_pipeline", "Pipeline", "RunInterrupted", "RunPreempted", "Stage", "StageError"]

#: where each public name lives
_HOMES = {"build_pipeline": "build", "serial_pipeline": "build", "Pipeline": "pipeline",
          "RunInterrupted": "pipeline", "RunPreempted": "pipeline", "Stage": "pipeline", "StageError": "pipeline"}
#: names that moved to the command floor: an import of them here names the new spelling
_MOVED = {name: f"{name} moved to the command floor: from commands import {name}"
          for name in ("cli_main", "parse_train_args")}


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, moved=_MOVED)
