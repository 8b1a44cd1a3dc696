"""The search space of ``baton tune``, written on the command line as ``KEY=DIST`` words.

A word whose value is a call of one of the forms below is a distribution over the dotted config ``KEY``;
any other ``KEY=VALUE`` word is a fixed override, as for ``baton train`` (engine/overrides.py)::

    policy.learn.learning_rate=loguniform(1e-4,1e-2)   a float, uniform in log space (0 < low < high)
    policy.discount_factor=uniform(0.9,0.999)          a float, uniform (low < high)
    policy.nstep=int(1,5)                              an integer from low to high, both included
    policy.learn.batch_size=choice(32,64,128)          one of the values (at least two, all different)

A ``choice`` value is a number, ``true``/``false``, ``none``, a word (``choice(mse,huber)``), a quoted string,
or a list or dict literal (``choice([64,64],[128,128])``). The text is parsed with Python's ``ast`` module
and only literals are read from it: nothing on a command line is run. A string value that looks like a call
is quoted to stay one: ``KEY='"f(x)"'``.

Examples:
    >>> dist = parse_distribution("policy.learn.learning_rate", "loguniform(1e-4, 1e-2)")
    >>> dist.kind, dist.low, dist.high
    ('loguniform', 0.0001, 0.01)
    >>> parse_distribution("policy.learn.batch_size", "choice(32,64,128)").choices
    (32, 64, 128)
    >>> parse_distribution("policy.nstep", "int(5,1)")
    Traceback (most recent call last):
    ...
    commands.search_space.SearchSpaceError: policy.nstep=int(5,1): int(low,high) needs low < high, got 5 and 1
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

__all__ = ["SearchSpaceError", "Distribution", "FORMS", "parse_distribution", "split_search_words",
           "looks_like_distribution"]

#: the distributions a ``KEY=DIST`` word may name, as the help and the errors show them
FORMS = {
    "loguniform": "loguniform(LOW,HIGH): a float uniform in log space, 0 < LOW < HIGH",
    "uniform": "uniform(LOW,HIGH): a float, LOW < HIGH",
    "int": "int(LOW,HIGH): an integer, LOW <= value <= HIGH, LOW < HIGH",
    "choice": "choice(A,B,...): one of two or more different values (numbers, true/false, none, words, "
              "quoted strings, [lists])",
}
_CALL = re.compile(r"^\s*[A-Za-z_]\w*\s*\(")  # a call, or the start of one (a missing ")" is an error)


class SearchSpaceError(ValueError):
    """A ``KEY=DIST`` word that does not parse, or whose bounds cannot be sampled; the message names the word,
    the bad part and the valid forms."""


@dataclass(frozen=True)
class Distribution:
    """One dimension of the search: ``key`` (a dotted config key) drawn from ``kind``.

    Attributes:
        key: the config key, also the optuna parameter name.
        kind: ``loguniform``, ``uniform``, ``int`` or ``choice``.
        text: the distribution as written (``loguniform(1e-4,1e-2)``), kept for the study's record.
        low, high: the bounds (``loguniform``, ``uniform``, ``int``).
        choices: the values of a ``choice``, as optuna stores them: numbers, bools, None and strings; a list
            or dict value is kept as its source text (``"[64,64]"``), which the override parses.
    """

    key: str
    kind: str
    text: str
    low: Optional[float] = None
    high: Optional[float] = None
    choices: Tuple[Any, ...] = field(default_factory=tuple)

    def suggest(self, trial: Any) -> Any:
        """This dimension's value for an optuna ``trial`` (its sampler decides)."""
        if self.kind == "loguniform":
            return trial.suggest_float(self.key, self.low, self.high, log=True)
        if self.kind == "uniform":
            return trial.suggest_float(self.key, self.low, self.high)
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high))
        return trial.suggest_categorical(self.key, list(self.choices))

    def probes(self) -> List[Any]:
        """The values a config check tries before any trial: each bound, or each choice."""
        return list(self.choices) if self.kind == "choice" else [self.low, self.high]

    def override(self, value: Any) -> str:
        """``KEY=VALUE`` text that sets ``value`` (one this dimension draws), for ``engine.overrides``."""
        return f"{self.key}={value_text(value)}"


def value_text(value: Any) -> str:
    """A drawn value as override text: ``true``/``false``, ``none``, a float's repr (exact), a string as is.

    Examples:
        >>> [value_text(v) for v in (True, None, 0.001, 64, "[64,64]")]
        ['true', 'none', '0.001', '64', '[64,64]']
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def looks_like_distribution(text: str) -> bool:
    """Whether a ``KEY=...`` value is written as a call, which ``baton tune`` reads as a distribution."""
    return bool(_CALL.match(text))


def split_search_words(words: Sequence[str]) -> Tuple[List[Distribution], List[str]]:
    """``KEY=DIST`` and ``KEY=VALUE`` words -> ``(distributions, fixed overrides)``, each in order.

    Raises:
        SearchSpaceError: a word without ``=``, a malformed or unknown distribution, bounds that cannot be
            sampled, or a key given twice as a distribution.
    """
    space: List[Distribution] = []
    fixed: List[str] = []
    for word in words:
        key, sep, text = word.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SearchSpaceError(f"{word!r}: write KEY=DIST (e.g. policy.learn.learning_rate=loguniform(1e-4,1e-2)) "
                                   f"or KEY=VALUE (a fixed override)")
        if not looks_like_distribution(text):
            fixed.append(word)
            continue
        dist = parse_distribution(key, text)
        if any(other.key == key for other in space):
            raise SearchSpaceError(f"{word}: {key} has a distribution already; give each key one")
        space.append(dist)
    keys = {dist.key for dist in space}
    both = [item for item in fixed if item.partition("=")[0].strip() in keys]
    if both:
        raise SearchSpaceError(f"{both[0]}: {both[0].partition('=')[0]} is searched (a distribution) and fixed "
                               f"(KEY=VALUE) at once: give one of them")
    return space, fixed


def parse_distribution(key: str, text: str) -> Distribution:
    """The distribution ``text`` of config key ``key`` (the module docstring lists the forms).

    Raises:
        SearchSpaceError: naming ``KEY=text``, the part that is wrong, and the valid forms.
    """
    word = f"{key}={text.strip()}"
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise SearchSpaceError(f"{word}: not a distribution ({err.msg}); {_forms()}") from None
    if not isinstance(tree, ast.Call) or not isinstance(tree.func, ast.Name):
        raise SearchSpaceError(f"{word}: not a distribution; {_forms()}")
    kind = tree.func.id
    if kind not in FORMS:
        raise SearchSpaceError(f"{word}: unknown distribution {kind!r}; {_forms()}")
    if tree.keywords:
        raise SearchSpaceError(f"{word}: {kind}() takes its values in order, without names "
                               f"({tree.keywords[0].arg}=...); {FORMS[kind]}")
    segments = [ast.get_source_segment(text.strip(), node) or "?" for node in tree.args]
    if kind == "choice":
        return _choice(key, word, text.strip(), tree.args, segments)
    if len(tree.args) != 2:
        raise SearchSpaceError(f"{word}: {kind} takes 2 values, got {len(tree.args)}; {FORMS[kind]}")
    low, high = (_number(word, kind, node, segment) for node, segment in zip(tree.args, segments))
    if kind == "int":
        for value, segment in ((low, segments[0]), (high, segments[1])):
            if not float(value).is_integer():
                raise SearchSpaceError(f"{word}: {segment!r} is not an integer; {FORMS[kind]} (uniform(LOW,HIGH) "
                                       f"draws floats)")
        low, high = int(low), int(high)
    if not low < high:
        raise SearchSpaceError(f"{word}: {kind}(low,high) needs low < high, got {segments[0]} and {segments[1]}")
    if kind == "loguniform" and low <= 0:
        raise SearchSpaceError(f"{word}: loguniform needs 0 < low (a log scale), got {segments[0]}; uniform(LOW,HIGH) "
                               f"takes values from zero or below")
    return Distribution(key, kind, text.strip(), low=low, high=high)


# ---- helpers ---------------------------------------------------------------------------------------
def _forms() -> str:
    return "valid forms: " + "; ".join(FORMS.values())


def _number(word: str, kind: str, node: ast.AST, segment: str) -> float:
    """A bound: an int or float literal (``-1``, ``1e-4``), finite."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        value = None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SearchSpaceError(f"{word}: {segment!r} is not a number; {FORMS[kind]}")
    if not math.isfinite(value):
        raise SearchSpaceError(f"{word}: {segment!r} is not a finite number; {FORMS[kind]}")
    return value


def _choice(key: str, word: str, text: str, nodes: Sequence[ast.AST], segments: Sequence[str]) -> Distribution:
    values: List[Any] = []
    for node, segment in zip(nodes, segments):
        values.append(_choice_value(word, node, segment))
    if len(values) < 2:
        raise SearchSpaceError(f"{word}: choice needs at least two values (one value is a fixed override: "
                               f"{key}={segments[0] if segments else 'VALUE'}); {FORMS['choice']}")
    seen: List[Any] = []
    for value, segment in zip(values, segments):
        if any(type(value) is type(other) and value == other for other in seen):
            raise SearchSpaceError(f"{word}: {segment!r} is given twice; {FORMS['choice']}")
        seen.append(value)
    return Distribution(key, "choice", text, choices=tuple(values))


def _unquoted_text(segment: str) -> bool:
    """Whether ``segment`` reads as text a quote would make a value (an env id ``CartPole-v1``, a path): no quote,
    bracket or brace of its own."""
    text = segment.strip()
    return bool(text) and not any(mark in text for mark in "'\"[]{}()")


def _choice_value(word: str, node: ast.AST, segment: str) -> Any:
    """A choice as optuna stores it: a bare word is its text (``mse``; ``true``/``false``/``none`` as the
    override words mean them), a literal number, bool, None or string itself, a list or dict its source."""
    if isinstance(node, ast.Name):
        lowered = node.id.lower()
        return {"true": True, "false": False, "none": None, "null": None}.get(lowered, node.id)
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        quoted = f"; quote a word with other characters: '{segment.strip()}'" if _unquoted_text(segment) else ""
        raise SearchSpaceError(f"{word}: {segment!r} is not a value (a number, true/false, none, a word, a quoted "
                               f"string or a [list] literal){quoted}; {FORMS['choice']}") from None
    if isinstance(value, (list, tuple, dict)):
        return segment
    if isinstance(value, float) and not math.isfinite(value):
        raise SearchSpaceError(f"{word}: {segment!r} is not a finite number; {FORMS['choice']}")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise SearchSpaceError(f"{word}: {segment!r} is a {type(value).__name__}; {FORMS['choice']}")
