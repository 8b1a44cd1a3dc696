"""The command floor: the ``baton`` command (``python -m commands``) and the tools after training (eval,
export, plot, report, record, tune, check-ddp), above the run assembly of ``pipelines``; and the options
shared by ``baton train`` and every dizoo config run as a script (``cli_main``).

``import commands`` is cheap: each name below is imported from its module when first used (PEP 562), so
``baton --help`` and the other answers of ``commands.cli`` that train nothing load no torch or gymnasium.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lazy import lazy_exports

if TYPE_CHECKING:
    from .config_file import load_config_file
    from .options import cli_main, parse_train_args
    from .saved_run import load_saved_run

__all__ = ["cli_main", "parse_train_args", "load_config_file", "load_saved_run"]

#: where each public name lives
_HOMES = {"cli_main": "options", "parse_train_args": "options", "load_config_file": "config_file",
          "load_saved_run": "saved_run"}


__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
