"""``baton train --explain KEY``: what a config key means, as the code that reads it declares it.

Every key is declared once, by its reader, as a field of an ``engine.params.Params`` dataclass: its type, its
default, its rule and a docstring. This prints that declaration for a key, or for every key of a section, beside
the value the given config (``-c`` or ``--algo/--env``, with its overrides) compiles to.
"""
from __future__ import annotations

import difflib
from typing import Any, List, Mapping

from engine.config import ConfigError, compile_config, config_sections
from engine.config_rules import lookup
from engine.params import FieldInfo
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY

__all__ = ["explain", "explain_main"]


def explain(key: str, main_config: Mapping[str, Any], create_config: Mapping[str, Any]) -> str:
    """The declaration of ``key`` (a dotted path such as ``policy.learn.batch_size``; a section such as
    ``policy.learn`` lists its keys) in the config ``(main_config, create_config)``, with its compiled value.

    Raises:
        ConfigError: no key or section of that path, naming the closest ones.
    """
    cfg = compile_config(main_config, create_config, save=False)
    sections = config_sections(POLICY_REGISTRY.get(cfg["policy"]["type"]), ENV_REGISTRY.get(cfg["env"]["type"]))
    infos: List[FieldInfo] = [info for name, params_cls in sections.items() for info in params_cls.fields_info(name)]
    wanted = key.strip(".")
    chosen = [info for info in infos if info.path == wanted or info.path.startswith(wanted + ".")]
    if not chosen:
        paths = [info.path for info in infos]
        close = difflib.get_close_matches(wanted, paths, n=3, cutoff=0.5)
        ends = [path for path in paths if path.endswith("." + wanted.rsplit(".", 1)[-1])]
        hint = close or ends[:3]
        raise ConfigError(f"--explain {key!r}: no such config key or section"
                          f"{'; did you mean ' + ' or '.join(map(repr, hint)) + '?' if hint else ''} "
                          f"(sections: {', '.join(name for name in sections if name)})")
    return "\n".join(_describe(info, lookup(cfg, info.path)) for info in chosen)


def _describe(info: FieldInfo, value: Any) -> str:
    doc = " ".join(info.doc.split())
    if info.section:
        return f"{info.path}  (section {info.type})\n    {doc}".rstrip()
    facts = [info.type, f"default {info.default!r}"]
    if value != info.default:
        facts.append(f"this config: {value!r}")
    if info.rule:
        facts.append(info.rule)
    return f"{info.path}  ({'; '.join(facts)})\n    {doc}".rstrip()


def explain_main(key: str, input_cfg: Any) -> int:
    """Print ``explain(key, *input_cfg)``; 0."""
    print(explain(key, *input_cfg), flush=True)
    return 0
