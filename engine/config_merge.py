"""Merging a user's config over its defaults: unknown keys and wrong types refused with a message that names the
key path and the key meant. ``engine.config`` (whole configs) and ``engine.params`` (one typed section) both merge
through here, so every such message is worded alike."""
from __future__ import annotations

import copy
import difflib
import math
from typing import Any, Dict, List, Mapping, Optional

from .config_rules import ConfigError, fits

__all__ = ["deep_merge", "plain", "check_type", "unknown_key_message"]


def deep_merge(defaults: Mapping[str, Any], user: Mapping[str, Any], path: str = "", *,
               root: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Return ``defaults`` updated by ``user``, recursively; unknown keys and wrong types raise ConfigError.

    ``root``: the whole tree ``path`` lies in (default: ``defaults`` itself when ``path`` is empty), searched
    for a key misplaced at another depth (``batch_size`` at the top: did you mean ``policy.learn.batch_size``).
    """
    result = copy.deepcopy(dict(defaults))
    free_form = len(defaults) == 0
    root = defaults if root is None and not path else root
    for key, value in user.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in defaults:
            if free_form:
                result[key] = copy.deepcopy(value)
                continue
            raise ConfigError(unknown_key_message(key_path, key, defaults, root=root))
        default = defaults[key]
        if isinstance(default, Mapping):
            if not isinstance(value, Mapping):
                raise ConfigError(f"config key {key_path!r} must be a dict (type dict), got "
                                  f"{type(value).__name__}: {value!r}")
            result[key] = deep_merge(default, value, key_path, root=root)
        else:
            check_type(key_path, default, value)
            result[key] = copy.deepcopy(value)
    return result



def plain(value: Any) -> Any:
    """EasyDicts and tuples to new plain dicts and lists, so merging and JSON see one shape."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _type_label(value: Any) -> str:
    return type(value).__name__


def check_type(key_path: str, default: Any, value: Any) -> None:
    """``value`` must be of ``default``'s type (``engine.config_rules.fits``: a bool is no int, an int is a
    float, a tuple a list); a default of None takes anything here (its declared type is ``ValueRules.types``')."""
    if default is None:
        return
    base = next((kind for kind in (bool, int, float, str, list, tuple) if isinstance(default, kind)), None)
    if not (fits(base, value) if base is not None else isinstance(value, type(default))):
        raise ConfigError(f"config key {key_path!r} expects {_type_label(default)} "
                          f"(default {default!r}), got {_type_label(value)}: {value!r}{_env_object_hint(value)}")
    if isinstance(default, float) and isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"config key {key_path!r} is NaN")


def _env_object_hint(value: Any) -> str:
    """What to give instead of an env class or object where a config wants an id (SB3 takes an instance): a config
    holds plain values, written to ``config.json`` and read by every rank and env worker, which each make their
    own envs, so the id must be one each of those processes can make: the id the object was made from, or a
    ``module:Id`` whose module registers it on import (an id registered in the script alone does not reach them)."""
    if not (hasattr(value, "reset") and hasattr(value, "step")):
        return ""
    made_from = getattr(getattr(value, "spec", None), "id", None)
    if isinstance(made_from, str) and made_from:
        return f". A config names an env by its gymnasium id, not an env object: give env.env_id={made_from!r}"
    name = value.__name__ if isinstance(value, type) else type(getattr(value, "unwrapped", value)).__name__
    return (f". A config names an env by its gymnasium id, not a class or an env object (each rank and env worker "
            f"makes its own): in a module of yours, register it on import, gymnasium.register(id='{name}-v0', "
            f"entry_point={name}), and give env.env_id='your_module:{name}-v0' (docs/observations.md)")


def unknown_key_message(key_path: str, key: Any, valid: Mapping[str, Any], *, root: Optional[Mapping[str, Any]] = None,
                         rest: Optional[str] = None) -> str:
    """``key`` is not among ``valid`` (the keys at ``key_path``'s depth): the message names the full path and
    the key meant. That is the same key at another depth of ``root`` (the whole tree) when there is one
    (``batch_size`` -> ``policy.learn.batch_size``; ``rest``: the dotted words from ``key`` on, as typed), else
    the closest key at this depth.

    Examples:
        >>> tree = {"seed": 0, "policy": {"learn": {"batch_size": 64}}}
        >>> unknown_key_message("batch_size", "batch_size", tree, root=tree)
        "unknown config key 'batch_size'; did you mean 'policy.learn.batch_size'? Valid keys: policy, seed"
    """
    candidates = [str(k) for k in valid]
    parent = key_path.rsplit(".", 1)[0] if "." in key_path else ""
    elsewhere = _paths_ending(root, rest or str(key)) if root is not None else []
    close = difflib.get_close_matches(str(key), candidates, n=1, cutoff=0.5)
    msg = f"unknown config key {key_path!r}"
    if elsewhere:
        msg += f"; did you mean {' or '.join(map(repr, elsewhere[:3]))}?"
    elif close:
        suggestion = f"{parent}.{close[0]}" if parent else close[0]
        msg += f"; did you mean {suggestion!r}?"
    msg += f" Valid keys{' under ' + repr(parent) if parent else ''}: {', '.join(sorted(candidates))}"
    return msg


def _paths_ending(tree: Mapping[str, Any], suffix: str) -> List[str]:
    """The dotted paths of ``tree`` (sections and values) that end in the words of ``suffix``, shortest first."""
    found, stack = [], [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if path == suffix or path.endswith(f".{suffix}"):
                found.append(path)
            if isinstance(value, Mapping):
                stack.append((path, value))
    return sorted(found, key=lambda p: (p.count("."), p))
