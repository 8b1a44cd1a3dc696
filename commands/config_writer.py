"""Write a config as a runnable dizoo-style file: ``main_config`` and ``create_config`` as Python literals and
the ``cli_main`` block, so ``baton train -c FILE`` and ``python FILE`` both run it (``baton tune`` writes its
best configuration this way).

Only plain data is written (dicts with string keys, lists, tuples, strings, numbers, bools, None), so the file
runs no code but its own literals and the standard ``cli_main`` call; an infinite or NaN float is written as
``float("inf")`` / ``float("nan")`` (a literal has none).

Examples:
    >>> print(config_source({"exp_name": "x", "env": {"stop_value": float("inf")}}, {"policy": {"type": "dqn"}},
    ...                     "A config.").split("\\n\\n")[1])
    main_config = {
        "exp_name": "x",
        "env": {
            "stop_value": float("inf"),
        },
    }
    create_config = {
        "policy": {
            "type": "dqn",
        },
    }
"""
from __future__ import annotations

import math
from typing import Any, List, Mapping

from engine.fileio import atomic_write

__all__ = ["config_source", "write_config_file"]

_MAIN_BLOCK = '''if __name__ == "__main__":
    from commands import cli_main

    cli_main((main_config, create_config))
'''


def config_source(main_config: Mapping[str, Any], create_config: Mapping[str, Any], doc: str) -> str:
    """The text of a config file holding ``main_config`` and ``create_config``, with ``doc`` as its docstring.

    Raises:
        TypeError: a value that is not plain data (naming its key path).
    """
    doc = doc.replace('"""', "'''").rstrip()
    return (f'"""{doc}\n"""\n\n'
            f"main_config = {_literal(main_config, 'main_config', 0)}\n"
            f"create_config = {_literal(create_config, 'create_config', 0)}\n\n"
            f"{_MAIN_BLOCK}")


def write_config_file(path: str, main_config: Mapping[str, Any], create_config: Mapping[str, Any], doc: str) -> str:
    """Write ``config_source(...)`` to ``path`` atomically (a reader never sees half a file); returns ``path``."""
    text = config_source(main_config, create_config, doc).encode("utf-8")
    return atomic_write(path, lambda f: f.write(text))


def _literal(value: Any, where: str, depth: int) -> str:
    pad, inner = "    " * depth, "    " * (depth + 1)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        lines: List[str] = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: key {key!r} is a {type(key).__name__}; a config's keys are strings")
            lines.append(f"{inner}{_string(key)}: {_literal(item, f'{where}.{key}', depth + 1)},")
        return "{\n" + "\n".join(lines) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)):
        items = [_literal(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
        text = ", ".join(items)
        if isinstance(value, tuple):
            text += "," if len(items) == 1 else ""
            return f"({text})"
        return f"[{text}]"
    if isinstance(value, str):
        return _string(value)
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'float("{value}")'
    raise TypeError(f"{where}={value!r} is a {type(value).__name__}: a config file holds plain data only "
                    f"(dicts, lists, strings, numbers, bools, None)")


def _string(text: str) -> str:
    """A string literal in double quotes (repr picks single ones)."""
    body = repr(text)[1:-1]
    if repr(text)[0] == "'":
        body = body.replace('"', '\\"').replace("\\'", "'")
    return f'"{body}"'
