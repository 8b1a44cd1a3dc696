"""Where a run writes: one directory per run, never another run's.

- ``exp_name`` given explicitly (``--exp-name``, ``build_pipeline(exp_name=...)``): exactly that directory.
- Otherwise the config's ``exp_name`` with the seed, ``<exp_name>_seed<seed>``, and when that already holds
  a run, the first free ``<exp_name>_seed<seed>_<n>`` (n = 2, 3, ...): running the same config twice
  keeps both runs.

A directory that already holds files is refused unless the run ``resume``\\ s it (continue) or ``force``\\ s
it (start over: the old directory is first moved aside to ``<dir>.old-<timestamp>``, nothing is deleted).
``resume`` without an explicit name continues the newest run of that config and seed (the highest n).
"""
from __future__ import annotations

import os
import re
import time
from typing import List

__all__ = ["RunDirError", "resolve_run_dir", "default_run_name"]


class RunDirError(ValueError):
    """The run directory cannot be used as asked; the message names it and the options that would."""


def default_run_name(exp_name: str, seed: int) -> str:
    """``<exp_name>_seed<seed>``, unless the name already ends in that (configs written as ``x_seed0``)."""
    suffix = f"_seed{seed}"
    stem = re.sub(r"_seed\d+$", "", exp_name.rstrip("/\\"))
    return stem + suffix


def resolve_run_dir(exp_name: str, seed: int, *, explicit: bool, resume: bool = False,
                    force: bool = False) -> str:
    """The directory this run writes to, after the checks above (``force`` has moved an old run aside).

    Args:
        exp_name: the explicit directory (``explicit``) or the config's base name.
        seed: the run's base seed, part of the default name.
        explicit: whether the user named the directory (then it is used as given).
        resume: continue the run in the directory (it must hold one).
        force: start over in the directory, moving what it holds aside first.

    Raises:
        RunDirError: ``resume`` and ``force`` together; ``resume`` with no run to continue; an explicit
            directory that holds a run and neither option.
    """
    if resume and force:
        raise RunDirError("--resume continues a run and --force starts it over: give one of them")
    if explicit:
        return _checked(exp_name, resume, force)
    base = default_run_name(exp_name, seed)
    if resume:
        runs = [d for d in _numbered(base) if _holds_files(d)]
        if not runs:
            raise RunDirError(f"--resume: no run to continue at {base} (nor {base}_<n>): start without --resume, "
                              f"or give the run's directory with --exp-name")
        return runs[-1]
    if force:
        return _checked(base, resume, force)
    for candidate in _numbered(base, include_free=True):
        if not _holds_files(candidate):
            return candidate
    raise AssertionError("unreachable: _numbered ends with a free name")


def _checked(path: str, resume: bool, force: bool) -> str:
    if resume:
        if not _holds_files(path):
            raise RunDirError(f"--resume: no run to continue at {path}: start without --resume, or give the run's "
                              f"directory with --exp-name")
        return path
    if _holds_files(path):
        if not force:
            raise RunDirError(f"{path} already holds a run ({', '.join(sorted(os.listdir(path))[:4])}): --resume "
                              f"to continue it, --force to start over (it is moved aside first), or another "
                              f"--exp-name")
        aside = _aside_name(path)
        os.replace(path, aside)
        print(f"baton: moved the earlier run {path} aside to {aside}", flush=True)
    return path


def _holds_files(path: str) -> bool:
    return os.path.isdir(path) and bool(os.listdir(path))


def _numbered(base: str, include_free: bool = False) -> List[str]:
    """``base`` and its existing ``base_<n>`` siblings in order; with ``include_free``, then the next free one."""
    parent, name = os.path.split(base)
    pattern = re.compile(re.escape(name) + r"_(\d+)$")
    numbers = sorted(int(m.group(1)) for entry in (os.listdir(parent or ".") if os.path.isdir(parent or ".") else [])
                     if (m := pattern.match(entry)) and int(m.group(1)) >= 2)
    runs = [base] + [f"{base}_{n}" for n in numbers]
    if include_free:
        runs.append(f"{base}_{(numbers[-1] if numbers else 1) + 1}")
    return runs


def _aside_name(path: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, n = f"{path.rstrip('/')}.old-{stamp}", 2
    while os.path.exists(candidate):
        candidate, n = f"{path.rstrip('/')}.old-{stamp}-{n}", n + 1
    return candidate

