"""Name -> class registries for policies and envs, the ``type`` names used in ``create_config``.

``CONFIG_SECTIONS`` holds the typed sections of a config (``engine.params``) the same way.

Packages make their types known in two ways: importing a module that calls ``register`` (what a user's
own code does), or declaring an entry point in the ``baton.policies`` / ``baton.envs`` groups, which is
loaded the first time an unknown name is asked for. The second keeps ``import engine`` free of torch.
"""
from __future__ import annotations

import difflib
import importlib

from typing import Any, Dict, Iterable, List, Optional

from .config_rules import ConfigError

__all__ = ["Registry", "POLICY_REGISTRY", "ENV_REGISTRY", "CONFIG_SECTIONS", "UnknownTypeError", "ImportNamesError",
           "MissingExtraError"]


class UnknownTypeError(KeyError):
    """A ``type`` name that no registered policy or env carries."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class ImportNamesError(ConfigError, ImportError):
    """A module of ``create_config.<kind>.import_names`` that cannot be imported: the config names a file of the
    user's that is not on the path, so it is a config error (one ``baton:`` line), and still an ``ImportError``."""


class MissingExtraError(ImportError):
    """An optional package (a pip extra: ``.[atari]``, ``.[box2d]``, ``.[envpool]``, ...) that the config's env,
    backend or dataset needs and this environment lacks. The config asks for something this install cannot give,
    so it ends a command in one ``baton:`` line naming the extra, as ``baton eval`` ends; any other ImportError
    stays a bug's traceback."""

    @classmethod
    def of_import(cls, what: str, err: ImportError) -> "MissingExtraError":
        """``what`` (the package, the extra, the pip line) and why importing it failed: a broken install (a
        library the package loads, a GPU runtime) reads otherwise than a missing one."""
        return cls(f"{what}; importing it failed with {type(err).__name__}: {err}")


class Registry:
    def __init__(self, kind: str, entry_point_group: str) -> None:
        self.kind = kind
        self._group = entry_point_group
        self._items: Dict[str, Any] = {}
        self._entry_points_loaded = False

    def register(self, name: str, obj: Any = None) -> Any:
        """Register ``obj`` under ``name``; usable as ``@REGISTRY.register("name")``."""
        if obj is None:
            def decorator(target: Any) -> Any:
                self._items[name] = target
                return target
            return decorator
        self._items[name] = obj
        return obj

    def import_modules(self, names: Iterable[str], key: Optional[str] = None) -> None:
        """Import modules that register types (DI-engine's ``import_names``); ``key``: the config key that named
        them, for the error (default ``create_config <kind>.import_names``)."""
        for module in names:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as err:  # the module itself not found: a path away from the user's own file
                if err.name is None or not (module == err.name or module.startswith(err.name + ".")):
                    raise  # the module is there and its own import fails: the user's code, with its traceback
                script = "" if key else " (as running the config file as a script does for its own directory)"
                raise ImportNamesError(f"{key or f'create_config {self.kind}.import_names'}: cannot import {module!r} "
                                       f"({type(err).__name__}: {err}); put the directory holding it on PYTHONPATH"
                                       f"{script}, or install its package") from err

    def get(self, name: str) -> Any:
        if name not in self._items:
            self._load_entry_point(name)
        if name not in self._items:
            self._load_all_entry_points()  # another entry point's module may register it (one module, several types)
        if name not in self._items:
            known = ", ".join(sorted(self.names())) or "none"
            close = difflib.get_close_matches(str(name), self.names(), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownTypeError(f"unknown {self.kind} type {name!r}{hint}; registered {self.kind} types: {known}")
        return self._items[name]

    def names(self) -> List[str]:
        self._load_all_entry_points()
        return sorted(self._items)

    def _entry_points(self) -> List[Any]:
        from importlib import metadata  # deferred: costs ~25 ms, needed only for an unknown name

        return list(metadata.entry_points(group=self._group))

    def _load_entry_point(self, name: str) -> None:
        for ep in self._entry_points():
            if ep.name == name:
                ep.load()  # the module registers itself on import

    def _load_all_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in self._entry_points():
            if ep.name not in self._items:
                try:
                    ep.load()
                except ImportError:  # an extra that is not installed (box2d, atari): not listed
                    continue


POLICY_REGISTRY = Registry("policy", "baton.policies")
ENV_REGISTRY = Registry("env", "baton.envs")
#: the config's sections beside ``env`` and ``policy`` (``log``, ``ckpt``, ...): name -> the ``engine.params.Params``
#: class its reader declares, found through the ``baton.config_sections`` entry points (``engine.config``)
CONFIG_SECTIONS = Registry("config section", "baton.config_sections")
