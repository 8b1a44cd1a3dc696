"""Typed config sections: each section of a config is a dataclass beside the code that reads it.

A config stays a DI-engine-style nested dict (``main_config``), and that is what users write, override and what
a run saves. The code that consumes a section declares it once, as a dataclass deriving from ``Params``: each
field's type, its default, its rule (``param(64, rule="at_least_one")``) and, in the docstring written under
it, what it means. From that one declaration come the section's defaults (``defaults()``, merged under the
user's values by ``engine.config.compile_config``), its value checks (``rules()``), its documentation
(``field_docs()``, ``baton train --explain KEY``) and the typed object the reader uses (``of(section)``)::

    @dataclass
    class CheckpointParams(Params):
        save_freq: int = param(0, rule="not_negative")
        \"\"\">0: also save every N train iterations.\"\"\"

    ckpt = CheckpointParams.of(cfg.ckpt)   # typed; an unknown key or a wrong type is a ConfigError
    ckpt.save_freq

A field whose type is another ``Params`` class is a nested section (``section(EvalParams, ...)``). A field
typed ``Dict[str, Any]`` with an empty default takes any keys (a free-form section, e.g. ``env.env_kwargs``).
Sections of the run besides ``env`` and ``policy`` (``log``, ``ckpt``, ``ddp``, ...) are found through
``engine.registry.CONFIG_SECTIONS`` (entry point group ``baton.config_sections``), so that ``engine`` names no
key of the floors above it, and a user's own middleware can declare a section of its own the same way.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import textwrap
import typing
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

from .config_merge import deep_merge, plain
from .config_rules import ValueRules, type_name

__all__ = ["Params", "FieldInfo", "param", "section", "RULES"]

#: the rules a field can carry (``engine.config_rules.ValueRules``' words)
RULES = ("at_least_one", "positive", "not_negative", "unit_interval")

P = TypeVar("P", bound="Params")

#: how each rule reads in ``FieldInfo`` (``baton train --explain``)
RULE_WORDS = {"at_least_one": ">= 1", "positive": "> 0", "not_negative": ">= 0", "unit_interval": "in [0, 1]"}


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """One key of a section as its reader declared it (``Params.fields_info``): what ``--explain`` prints."""

    path: str
    type: str
    default: Any
    rule: str
    doc: str
    section: bool = False


def param(default: Any, *, rule: Optional[str] = None, choices: Optional[Tuple[str, ...]] = None) -> Any:
    """A field with ``default`` (a list or dict default is copied for each instance), its value ``rule`` (one of
    ``RULES``) and the words it takes (``choices``), checked when a config is compiled."""
    if rule is not None and rule not in RULES:
        raise ValueError(f"param rule {rule!r} is not one of {', '.join(RULES)}")
    metadata: Dict[str, Any] = {}
    if rule is not None:
        metadata["rule"] = rule
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(params_cls: Type[P], **defaults: Any) -> Any:
    """A nested section's field: ``params_cls`` with these of its defaults changed for this owner (nested
    sections as dicts: ``section(EvalParams, evaluator=dict(eval_freq=1000))``)."""
    if defaults:
        return dataclasses.field(default_factory=lambda: params_cls.of(defaults))
    return dataclasses.field(default_factory=params_cls)


class Params:
    """The base of every typed config section (subclasses are ``@dataclass``es; see the module docstring)."""

    @classmethod
    def defaults(cls) -> Dict[str, Any]:
        """The section's defaults as the plain nested dict a config file would hold."""
        return cls().to_dict()

    @classmethod
    def of(cls: Type[P], values: Optional[Mapping[str, Any]] = None, path: str = "") -> P:
        """The typed section for ``values`` (a config's section: dict or EasyDict), its absent keys at their
        defaults, checked against its rules; ``path``: where the section sits in a config (``"policy"``), for
        the messages.

        Raises:
            engine.config.ConfigError: an unknown key (naming ``path``'s key and the closest valid one), a
                value of the wrong type, or one its rule refuses.
        """
        merged = deep_merge(cls.defaults(), plain(dict(values or {})), path)
        tree: Dict[str, Any] = merged
        for part in reversed(path.split(".") if path else []):
            tree = {part: tree}
        cls.rules(path).check(tree)
        return cls._from_plain(merged)

    @classmethod
    def pick(cls: Type[P], values: Mapping[str, Any]) -> P:
        """The typed section of ``values``' keys that are this class's fields, the others left alone (the run's
        own keys at the top of a config, beside its sections: ``engine.config.RunParams.pick(cfg)``)."""
        names = {field.name for field in dataclasses.fields(cls)}
        return cls.of({key: value for key, value in values.items() if key in names})

    @classmethod
    def _from_plain(cls: Type[P], merged: Mapping[str, Any]) -> P:
        kwargs = {}
        for name, sub in _sections(cls).items():
            kwargs[name] = sub._from_plain(merged[name]) if sub is not None else merged[name]
        return cls(**kwargs)

    def to_dict(self) -> Dict[str, Any]:
        """This section as a plain nested dict (deep copies)."""
        return dataclasses.asdict(self)

    @classmethod
    def rules(cls, prefix: str) -> ValueRules:
        """The value rules of this section's fields and of its nested sections, at dotted paths under ``prefix``
        (e.g. ``"policy"``)."""
        found: Dict[str, list] = {rule: [] for rule in RULES}
        choices: Dict[str, Tuple[str, ...]] = {}
        types: Dict[str, Any] = {}  # a None default has no type for the merge to check against: the declared one
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            path = f"{prefix}.{field.name}" if prefix else field.name
            sub = _sections(cls)[field.name]
            if sub is not None:
                nested = sub.rules(path)
                for rule in RULES:
                    found[rule].extend(getattr(nested, rule))
                choices.update(nested.choices)
                types.update(nested.types)
                continue
            if field.default is None:
                types[path] = hints[field.name]
            if "rule" in field.metadata:
                found[field.metadata["rule"]].append(path)
            if "choices" in field.metadata:
                choices[path] = field.metadata["choices"]
        return ValueRules(**{rule: tuple(paths) for rule, paths in found.items()}, choices=choices, types=types)

    @classmethod
    def fields_info(cls, prefix: str = "") -> List[FieldInfo]:
        """Every key of this section and of its nested sections, in declaration order: path, type, default,
        rule and docstring (a nested section is an entry too, ``section=True``)."""
        return _fields_info(cls, prefix, cls())

    @classmethod
    def field_docs(cls, prefix: str = "") -> Dict[str, str]:
        """Each key's docstring at its dotted path, nested sections included; a key without one maps to ""."""
        return {info.path: info.doc for info in cls.fields_info(prefix)}


def _sections(cls: type) -> Dict[str, Optional[Type[Params]]]:
    """Each field's nested ``Params`` class, or None for a value field (cached per class)."""
    cached = cls.__dict__.get("_section_types")
    if cached is None:
        hints = typing.get_type_hints(cls)
        cached = {}
        for field in dataclasses.fields(cls):
            hint = hints[field.name]
            cached[field.name] = hint if inspect.isclass(hint) and issubclass(hint, Params) else None
        cls._section_types = cached  # type: ignore[attr-defined]
    return cached


def _fields_info(cls: Type[Params], prefix: str, instance: Params) -> List[FieldInfo]:
    hints = typing.get_type_hints(cls)
    docs = _attribute_docstrings(cls)
    found: List[FieldInfo] = []
    for field in dataclasses.fields(cls):
        path = f"{prefix}.{field.name}" if prefix else field.name
        value = getattr(instance, field.name)
        sub = _sections(cls)[field.name]
        if sub is not None:
            found.append(FieldInfo(path, sub.__name__, None, "", docs.get(field.name, ""), section=True))
            found.extend(_fields_info(sub, path, value))
            continue
        words = [RULE_WORDS[field.metadata["rule"]]] if "rule" in field.metadata else []
        if "choices" in field.metadata:
            words.append("one of " + ", ".join(map(repr, field.metadata["choices"])))
        found.append(FieldInfo(path, type_name(hints[field.name]), copy.deepcopy(value), "; ".join(words),
                               docs.get(field.name, "")))
    return found


def _attribute_docstrings(cls: type) -> Dict[str, str]:
    """``name -> docstring`` for the annotated attributes of ``cls`` and its bases that have a string literal
    right under them (the convention Sphinx and Tianshou's ``Params`` use)."""
    docs: Dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass is Params or not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # defined where no source is kept (an interactive session)
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) \
                    and isinstance(after.value.value, str):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs
