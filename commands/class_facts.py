"""A class's declared facts read from its source file, without importing it.

``baton train --list-algos`` describes every registered policy by what its class declares (``pipeline``,
``action_spaces``), yet must answer without loading torch. So the entry point's module is found on the
path (its packages are not imported), parsed, and the class-level literal assignments are read, following
the base classes through the module's own definitions and its imports, nearest first, as Python's method
resolution order does for single inheritance. tests/pipelines/test_catalog.py checks the result against
the imported classes.
"""
from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.util
from typing import Any, Dict, Optional, Sequence, Tuple

__all__ = ["declared_facts"]


def declared_facts(target: str, name: str, facts: Sequence[str]) -> Optional[Dict[str, Any]]:
    """The class-level literal values of ``facts`` on a registered class or on its bases; None when its source
    cannot be found or read, or no class there is registered as ``name``. A fact no class in the chain assigns
    a literal to is left out.

    Args:
        target: an entry point's value: ``"package.module"`` (the class is the one decorated
            ``@<REGISTRY>.register("<name>")`` there) or ``"package.module:Class"``.
        name: the name it is registered under.
        facts: the class attributes to read.

    Examples:
        >>> declared_facts("policies.dqn", "dqn", ["pipeline", "action_spaces"])
        {'pipeline': 'off_policy', 'action_spaces': ('discrete',)}
    """
    module, _, cls = target.partition(":")
    try:
        tree = _tree(module)
        if tree is None:
            return None
        cls = cls or _registered_as(tree, name)
        if cls is None:
            return None
        found: Dict[str, Any] = {}
        _collect(module, cls, tuple(facts), found, depth=0)
    except (OSError, SyntaxError, ValueError, ImportError):
        return None
    return found


def _registered_as(tree: ast.Module, name: str) -> Optional[str]:
    """The class of ``tree`` decorated ``@...register("<name>")``."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                        and decorator.func.attr == "register" and decorator.args
                        and isinstance(decorator.args[0], ast.Constant) and decorator.args[0].value == name):
                    return node.name
    return None


def _collect(module: str, cls: str, names: Tuple[str, ...], found: Dict[str, Any], depth: int) -> None:
    tree = _tree(module)
    if tree is None or depth > 16:
        return
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    if node is None:  # imported into this module under that name: follow the import
        origin = _imported(tree, module, cls)
        if origin is not None:
            _collect(origin[0], origin[1], names, found, depth + 1)
        return
    for item in node.body:
        targets = item.targets if isinstance(item, ast.Assign) else [item.target] if isinstance(item, ast.AnnAssign) \
            else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in names and target.id not in found and item.value:
                try:
                    found[target.id] = ast.literal_eval(item.value)
                except ValueError:  # not a literal: another class's value, say; the next base may have one
                    pass
    for base in node.bases:
        if all(name in found for name in names):
            return
        if isinstance(base, ast.Name):
            _collect(module, base.id, names, found, depth + 1)


def _imported(tree: ast.Module, module: str, name: str) -> Optional[Tuple[str, str]]:
    """``(module, name)`` where ``from X import name`` (relative or absolute) in ``tree`` takes it from."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    if node.level:
                        parts = module.split(".")[:-node.level]
                        source = ".".join(parts + ([node.module] if node.module else []))
                    else:
                        source = node.module or ""
                    return source, alias.name
    return None


@functools.lru_cache(maxsize=None)
def _tree(module: str) -> Optional[ast.Module]:
    path = _source_path(module)
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


def _source_path(module: str) -> Optional[str]:
    """The ``.py`` file of ``module``, found on the path without importing any of its packages."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)  # a top-level name: found, not imported
    for i in range(len(rest)):
        locations = spec.submodule_search_locations if spec is not None else None
        if not locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join([top] + rest[:i + 1]), list(locations))
    origin = spec.origin if spec is not None else None
    return origin if origin and origin.endswith(".py") else None
