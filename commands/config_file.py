"""Loading a config file: the one place ``baton train``, ``baton tune`` and the other commands read one."""
from __future__ import annotations

import os
import runpy
from typing import Any, Tuple

from .user_errors import close_path_hint, config_load_error

__all__ = ["load_config_file", "removed_ddp_config"]


def load_config_file(path: str) -> Tuple[Any, Any]:
    """``(main_config, create_config)`` of a config file, without running its ``__main__`` block.

    Raises:
        FileNotFoundError: naming the path.
        ValueError: when the file does not define both names, or its own code fails (naming its line).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(removed_ddp_config(path) or f"config file not found: {path}{close_path_hint(path)}")
    if not path.endswith(".py"):
        raise ValueError(f"config file {path}: a config is a Python file defining main_config and create_config "
                         f"(see dizoo/**/config/*_config.py); {os.path.splitext(path)[1] or 'this'} files are not read")
    try:
        namespace = runpy.run_path(path, run_name="__baton_config__")
    except SyntaxError as err:
        raise ValueError(f"config file {path}, line {err.lineno}: {err.msg} (a config is Python: main_config and "
                         f"create_config as dicts)") from err
    except SystemExit as err:  # sys.exit() at the top level: it would end baton, silently, with its status
        raise ValueError(f"config file {path} exits while it is read (sys.exit({err.code!r})): a config defines "
                         f"main_config and create_config; put the code that runs it under "
                         f"if __name__ == \"__main__\":") from None
    except Exception as err:  # the file's own code failed (an import, a name): the line in it, in one line
        raise ValueError(config_load_error(path, err)) from err
    missing = [name for name in ("main_config", "create_config") if name not in namespace]
    if missing:
        raise ValueError(f"config file {path} does not define {' and '.join(missing)}")
    for name in ("main_config", "create_config"):
        if not isinstance(namespace[name], dict):  # EasyDict is one
            raise ValueError(f"config file {path}: {name} must be a dict, got {type(namespace[name]).__name__}")
    return namespace["main_config"], namespace["create_config"]


def removed_ddp_config(path: str) -> str:
    """The message for a ``<name>_ddp_config.py`` that is gone because it only renamed ``<name>_config.py``
    (every config runs data-parallel as it is), or "" when ``path`` is not one.

    Examples:
        >>> removed_ddp_config("no_such_config.py")
        ''
    """
    if not path.endswith("_ddp_config.py"):
        return ""
    base = path[: -len("_ddp_config.py")] + "_config.py"
    if not os.path.isfile(base):
        return ""
    return (f"config file {path} was removed: it differed from {base} in its name only, and every config runs "
            f"data-parallel as it is: baton train -c {base} --nproc 2 (or --gpus all, or torchrun "
            f"--nproc_per_node=2 {base})")
