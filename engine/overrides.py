"""``KEY=VALUE`` overrides of a config from the command line: ``policy.learn.batch_size=128``.

A key is a dotted path into ``main_config``. It is checked against the compiled defaults (the registered
policy's and env's ``default_config()`` under ``base_config()``, the tree ``compile_config`` checks a
config file against), so a misspelt key fails the same way a misspelt key in a file does: it names the
full path and the closest valid key. The value is text, parsed as the type of the field's default,
because ``64`` from a shell is a string and the config is typed:

- bool: ``true/false``, ``1/0``, ``yes/no``, ``on/off`` (any case)
- int: an integer literal (``1_000``; an integral float such as ``1e6`` is taken as the int)
- float: anything ``float()`` reads (``3e-4``, ``inf``)
- str: the text itself (one pair of surrounding quotes is dropped), ``none`` too: ``policy.compile=none`` is
  that field's own word, and the config's check refuses a word the field does not take
- list: a Python literal, ``[64,64]``; a free-form dict (default ``{}``): ``{'render_mode':'rgb_array'}``
  (a section with keys of its own is set key by key, so the file's other keys in it stay)
- a field whose default is None (its declared type, ``Optional[int]``, is checked when the config compiles),
  or a key under a free-form section (default ``{}``): ``true``/``false`` (any case) as the bool, a Python
  literal when the text is one (an integral float written with an exponent, ``1e5``, as the int), else the
  text; ``none``/``null`` give None

``env.stop_value=none`` turns the stop value off: stop_value is typed float and the evaluator's "never"
is ``inf``, so ``none`` stands for ``inf`` there. ``policy.type`` and ``env.type`` cannot be overridden:
every other key's check depends on them (they come from ``create_config``). ``create_config`` has no
overrides of its own: its ``env_manager`` lands in ``env.manager``, which is a key like any other
(``env.manager.type=async``).

Examples:
    >>> main = {"exp_name": "x", "policy": {"learn": {"batch_size": 64}}}
    >>> create = {"env": {"type": "cartpole"}, "policy": {"type": "dqn"}}
    >>> main, create = apply_overrides(main, create, ["policy.learn.batch_size=128", "env.stop_value=none"])
    >>> main["policy"]["learn"]["batch_size"], main["env"]["stop_value"]
    (128, inf)
"""
from __future__ import annotations

import ast
import copy
import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from .config import ConfigError, compile_config, plain
from .config_merge import unknown_key_message

__all__ = ["apply_overrides", "parse_override", "parse_value", "field_default"]

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
_NONE = ("none", "null")
#: float fields whose "none" means "off", and the float value that says so to the code reading them
_NONE_MEANS = {"env.stop_value": math.inf}
_FIXED = {"policy.type": "policy", "env.type": "env"}
_ANY = object()  # the "default" of a key under a free-form section: any value


def apply_overrides(main_config: Mapping[str, Any], create_config: Mapping[str, Any],
                    overrides: Sequence[str]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(main_config, create_config)`` as new plain dicts with ``overrides`` (``"a.b=c"``) set in order.

    With at least one override the result is compiled once (unsaved), so a value the config refuses
    (``policy.learn.batch_size=0``) fails here, before any process starts, naming its key.

    Raises:
        ConfigError: malformed ``KEY=VALUE``, unknown key (with the closest valid one), a value that does not
            parse as the field's type (naming key, value and type), or a compiled value out of range.
        engine.registry.UnknownTypeError: the config's own policy or env type is not registered.
    """
    main, create = plain(main_config), plain(create_config or {})
    if not overrides:
        return main, create
    defaults = _defaults(main, create)
    for item in overrides:
        key, text = parse_override(item)
        default = _field(defaults, key)
        _set(main, key, parse_value(key, text, default))
    compile_config(main, create, save=False)
    return main, create


def field_default(main_config: Mapping[str, Any], create_config: Mapping[str, Any], key: str) -> Any:
    """The compiled default of config key ``key`` (dotted), whose type an override of it is parsed as; None
    for a key under a free-form section (any value). What a caller needs to pick a value's kind before it has
    a value (``baton tune``: a float distribution over an int field is refused before any trial).

    Raises:
        ConfigError: an unknown key, naming the closest valid one (as ``apply_overrides``).
    """
    default = _field(_defaults(plain(main_config), plain(create_config or {})), key)
    return None if default is _ANY else default


def parse_override(item: str) -> Tuple[str, str]:
    """``"a.b=c"`` -> ``("a.b", "c")``; the value keeps any further ``=``."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {item!r}: write KEY=VALUE with a dotted key, e.g. policy.learn.batch_size=128")
    if key in _FIXED:
        section = _FIXED[key]
        raise ConfigError(f"override {item!r}: the {section} type comes from create_config.{section}.type (the "
                          f"config file, or --algo/--env), not an override; every other key's check depends on it")
    if key.split(".")[0] == "env_manager":
        raise ConfigError(f"override {item!r}: create_config.env_manager lands in env.manager; write "
                          f"env.manager{key[len('env_manager'):]}={text}")
    return key, text


def parse_value(key: str, text: str, default: Any) -> Any:
    """``text`` as a value of the type of ``default`` (the module docstring lists the rules).

    Raises:
        ConfigError: naming the key, the text and the type expected.
    """
    word = text.strip().lower()
    if default is None or default is _ANY:
        if word in ("true", "false"):  # a shell's bool (Optional[bool], a free-form key); Python's True parses too
            return word == "true"
        value = None if word in _NONE else _literal(text, fallback=text)
        if isinstance(value, float) and value.is_integer() and "e" in word:  # 1e5 for an Optional[int] count
            return int(value)  # (a float key takes an int too: engine.config_rules.fits)
        return value
    if word in _NONE:
        if key in _NONE_MEANS:
            return _NONE_MEANS[key]
        if isinstance(default, str):  # a word of the field's own (policy.compile=none), which the config checks
            return text.strip()
        raise _bad(key, text, default, "it cannot be None")
    if isinstance(default, bool):
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise _bad(key, text, default, "use true/false, 1/0, yes/no or on/off")
    if isinstance(default, int):
        value = _literal(text)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _bad(key, text, default)
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise _bad(key, text, default) from None
    if isinstance(default, str):
        stripped = text.strip()
        quoted = len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "'\""
        return stripped[1:-1] if quoted else text
    if isinstance(default, Mapping) and default:
        first = next(iter(default))
        raise ConfigError(f"override {key}={text!r}: config key {key!r} is a section; set its keys one by one, "
                          f"e.g. {key}.{first}=...")
    value = _literal(text)
    if isinstance(default, (list, tuple)) and isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(default, Mapping) and isinstance(value, Mapping):
        return value
    if not isinstance(default, (list, tuple, Mapping)) and isinstance(value, type(default)):
        return value
    raise _bad(key, text, default, "write a Python literal, e.g. [64,64]" if isinstance(default, (list, tuple))
               else "write a Python literal")


# ---- helpers ---------------------------------------------------------------------------------------
def _defaults(main: Mapping[str, Any], create: Mapping[str, Any]) -> Dict[str, Any]:
    """The compiled defaults alone: the types of ``main`` (``create_config`` or DI-engine's ``main.x.type``)
    with none of its values, so a field's type is its default's, not what the file happened to write."""
    types_only = {section: {"type": main[section]["type"]} for section in ("policy", "env")
                  if isinstance(main.get(section), Mapping) and "type" in main[section]}
    return plain(compile_config(types_only, create, save=False))


def _field(defaults: Mapping[str, Any], key: str) -> Any:
    """The default of ``key``, ``_ANY`` under a free-form section; ConfigError for an unknown key."""
    node: Any = defaults
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, Mapping):
            raise ConfigError(f"config key {'.'.join(parts[:i])!r} is a value ({type(node).__name__}), not a "
                              f"section: {key!r} cannot be set")
        if part not in node:
            if not node:  # a free-form section ({}) takes any key, as compile_config does
                return _ANY
            raise ConfigError(unknown_key_message(".".join(parts[:i + 1]), part, node, root=defaults,
                                                   rest=".".join(parts[i:])))
        node = node[part]
    return node


def _set(config: Dict[str, Any], key: str, value: Any) -> None:
    node = config
    *parents, last = key.split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = copy.deepcopy(value)


def _literal(text: str, fallback: Any = None) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return fallback


def _bad(key: str, text: str, default: Any, hint: Optional[str] = None) -> ConfigError:
    return ConfigError(f"override {key}={text!r}: config key {key!r} expects {type(default).__name__} "
                       f"(default {default!r}){'; ' + hint if hint else ''}")

