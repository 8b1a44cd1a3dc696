"""Value rules for config keys, declared by the code that reads the keys and checked at compile time.

A key's rule is declared on its field (``engine.params.param(64, rule="at_least_one")``); ``Params.rules``
gathers them into ``ValueRules`` at the keys' dotted paths, which ``compile_config`` and ``Params.of`` check.
The mechanism is here, so that every rule is worded alike. So is the type check of a key whose default is None
(``Optional[int] = param(None)``): the merge checks a value against its default's type, and None has none, so
the field's declared type is checked here.
"""
from __future__ import annotations

import difflib
import numbers
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, Tuple, Union

__all__ = ["ConfigError", "ValueRules", "lookup", "not_one_of", "fits", "type_name"]


class ConfigError(ValueError):
    """A config value or key that cannot be used; the message names the key path (``engine.config`` re-exports
    it: ``from engine.config import ConfigError``)."""

    __module__ = "engine.config"  # where users import it from, and what tracebacks and doctests name


def lookup(cfg: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path`` of ``cfg``, or None where a section or the key is absent."""
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def not_one_of(path: str, value: Any, choices: Tuple[str, ...]) -> str:
    """The message for a word a key does not take, with the closest one it does."""
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.4)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{path}={value!r} is not one of {', '.join(map(repr, choices))}{hint}"


@dataclass(frozen=True)
class ValueRules:
    """Ranges and words of dotted config keys; a key absent from the config is not checked. ``a + b`` holds
    both sets of rules.

    Attributes:
        at_least_one: counts and sizes (0 would train nothing or not run).
        positive: rates and sizes that must be > 0.
        not_negative: values where 0 turns a feature off.
        unit_interval: fractions in [0, 1].
        choices: the words each key takes.
        types: the declared type of each key whose default is None (``Optional[int]``): a value other than None
            must be of it.

    Examples:
        >>> ValueRules(at_least_one=("policy.nstep",)).check({"policy": {"nstep": 0}})
        Traceback (most recent call last):
        ...
        engine.config.ConfigError: config key 'policy.nstep' is 0: it must be at least 1 (with 0 the run would not run)
    """

    at_least_one: Tuple[str, ...] = ()
    positive: Tuple[str, ...] = ()
    not_negative: Tuple[str, ...] = ()
    unit_interval: Tuple[str, ...] = ()
    choices: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    types: Mapping[str, Any] = field(default_factory=dict)

    def __add__(self, other: "ValueRules") -> "ValueRules":
        return ValueRules(self.at_least_one + other.at_least_one, self.positive + other.positive,
                          self.not_negative + other.not_negative, self.unit_interval + other.unit_interval,
                          {**self.choices, **other.choices}, {**self.types, **other.types})

    def check(self, cfg: Mapping[str, Any]) -> None:
        """Raises ``engine.config.ConfigError`` naming the first key that breaks its rule and the fix; a key of a
        numeric rule must hold a number, and a key with a declared type a value of it (a key whose default is None
        takes any type in the merge: ``100k`` from the command line would reach the comparison as a string)."""
        for path in self.at_least_one + self.positive + self.not_negative + self.unit_interval:
            value = lookup(cfg, path)
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise ConfigError(f"config key {path!r} is {value!r}: it must be a number (write {path}=N)")
        for path in self.at_least_one:
            value = lookup(cfg, path)
            if value is not None and value < 1:
                raise ConfigError(f"config key {path!r} is {value!r}: it must be at least 1 (with {value!r} the run "
                                  f"would {'train nothing' if 'learn' in path or 'replay' in path else 'not run'})")
        for path in self.positive:
            value = lookup(cfg, path)
            if value is not None and not value > 0:
                what = (f"a learning rate must be > 0 (with {value!r} the run would train nothing)"
                        if "learning_rate" in path else "it must be > 0")
                raise ConfigError(f"config key {path!r} is {value!r}: {what}")
        for path in self.not_negative:
            value = lookup(cfg, path)
            if value is not None and value < 0:
                raise ConfigError(f"config key {path!r} is {value!r}: it must be >= 0 (0 turns it off)")
        for path in self.unit_interval:
            value = lookup(cfg, path)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ConfigError(f"config key {path!r} is {value!r}: it must lie in [0, 1]")
        for path, words in self.choices.items():
            value = lookup(cfg, path)
            if value is not None and value not in words:
                raise ConfigError(not_one_of(path, value, words))
        for path, hint in self.types.items():
            value = lookup(cfg, path)
            if value is not None and not fits(hint, value):
                raise ConfigError(f"config key {path!r} expects {type_name(hint)} (default None), got "
                                  f"{type(value).__name__}: {value!r}")


def fits(hint: Any, value: Any) -> bool:
    """Whether ``value`` (a plain config value: numbers, strings, lists, dicts) is of the declared type ``hint``;
    a hint this does not read (a class of the user's) is left to the code that reads the key.

    Examples:
        >>> fits(typing.Optional[int], 3), fits(typing.Optional[int], "100k"), fits(float, 1), fits(int, True)
        (True, False, True, False)
        >>> fits(typing.Union[int, typing.List[int]], [4, 84, 84])
        True
    """
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin is Union:
        return any(fits(arg, value) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint in (list, tuple) or origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if hint is dict or origin is dict:
        return isinstance(value, Mapping)
    return True


def type_name(hint: Any) -> str:
    """``int``, ``Optional[str]``, ``List[int]``: a type hint as a reader would write it."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("NoneType", "None")
