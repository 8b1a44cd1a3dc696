"""Config compilation: defaults merged under the user's values, with errors that say how to fix them.

``compile_config(main_config, create_config)`` looks up the policy and env named by ``create_config``'s
``type`` fields, deep-merges the defaults of every section under ``main_config``, and rejects what it does not
know: a misspelt key names its full path and the closest valid key; a value of the wrong type names the
field and both types; a value out of its range names the rule. A default dict that is empty (``{}``) accepts
any keys; a key whose default is ``None`` accepts None or a value of its declared type (``Optional[int]``).

Each section's defaults and rules are declared once, by the code that reads it, as an ``engine.params.Params``
dataclass: the run's own keys here (``RunParams``), the other sections through ``CONFIG_SECTIONS`` (``log``:
``middleware.logger.LogParams``, ``ckpt``, ``preempt``, ``ddp``, ``dataset``, and any a package adds), ``env``
by the env type (``data.envs.EnvParams``) and ``policy`` by the policy class (``policies.base.PolicyParams``).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type

from easydict import EasyDict

from .config_merge import deep_merge, plain, unknown_key_message
from .config_rules import ConfigError, ValueRules
from .fileio import atomic_write_json
from .params import Params, param
from .registry import CONFIG_SECTIONS, ENV_REGISTRY, POLICY_REGISTRY, UnknownTypeError

__all__ = ["ConfigError", "compile_config", "check_values", "config_sections", "run_rules", "RunParams", "ValueRules",
           "plain", "deep_merge", "save_config", "base_config", "CONFIG_FILE"]

CONFIG_FILE = "config.json"


@dataclass
class RunParams(Params):
    """The run's own keys, at the top of a config beside its sections."""

    exp_name: str = param("default_experiment")
    """The run directory: logs, checkpoints, ``config.json``, ``summary.json`` (``--exp-name``)."""
    seed: int = param(0)
    """Seeds the envs (env ``i`` gets ``seed + i``), torch, and each DDP rank (``pipelines.assembly.rank_seed``)."""
    torch_threads: int = param(0, rule="not_negative")
    """torch's intra-op threads; 0: this process's share of the cores, less one (``OMP_NUM_THREADS`` wins)."""
    import_names: List[str] = param([])
    """The modules ``create_config.policy`` and ``create_config.env``'s ``import_names`` imported (an algorithm or env
    type of your own), recorded so that a reader of the run's ``config.json`` knows what to import before it
    (``baton eval --import``); never imported from a ``config.json``: nothing read from a run directory runs."""


def base_config() -> Dict[str, Any]:
    """The defaults of every section beside ``env`` and ``policy``, and of the run's own keys."""
    defaults = RunParams.defaults()
    for name, params_cls in config_sections().items():
        if name:
            defaults[name] = params_cls.defaults()
    return defaults


def config_sections(policy_cls: Any = None, env_cls: Any = None) -> Dict[str, Type[Params]]:
    """Each part of a config and the ``Params`` class its reader declares: ``""`` (the run's own keys), every
    registered section, and ``env`` / ``policy`` where ``env_cls`` / ``policy_cls`` declare theirs
    (``baton train --explain``)."""
    found: Dict[str, Type[Params]] = {"": RunParams}
    for name in CONFIG_SECTIONS.names():
        found[name] = CONFIG_SECTIONS.get(name)
    for name, owner in (("env", env_cls), ("policy", policy_cls)):
        declared = getattr(owner, "Params", None)
        if isinstance(declared, type) and issubclass(declared, Params):
            found[name] = declared
    return found


def run_rules(env_cls: Any = None) -> ValueRules:
    """The value rules of the run's keys, of every registered section and of ``env_cls``'s ``env`` section (the
    ``policy`` section's are the policy class's)."""
    rules = ValueRules()
    for name, params_cls in config_sections(env_cls=env_cls).items():
        rules = rules + params_cls.rules(name)
    return rules


_CREATE_KEYS = {"env": {"type", "import_names"}, "policy": {"type", "import_names"},
                "env_manager": {"type", "shared_memory", "context", "overlap"}, "replay_buffer": {"type"}}


def compile_config(main_config: Mapping[str, Any], create_config: Optional[Mapping[str, Any]] = None, *,
                   seed: Optional[int] = None, exp_name: Optional[str] = None, save: bool = True) -> EasyDict:
    """Merge registered defaults under ``main_config`` and validate every key and type.

    Args:
        main_config: the user's config (``exp_name``, ``env``, ``policy``, ...).
        create_config: ``env=dict(type=...)``, ``policy=dict(type=...)``, optionally
            ``env_manager=dict(type='sync'|'async')``; a DI-engine ``import_names`` list is honoured.
        seed, exp_name: override the config's values (the CLI's ``--seed`` and ``--exp-name``).
        save: write the compiled config to ``<exp_name>/config.json``.

    Returns:
        The compiled config as an EasyDict, with ``env.type``, ``policy.type`` and ``env.manager`` filled.

    Raises:
        ConfigError: unknown key, wrong type, missing ``type``; a value the env type's or the policy's
            ``check_config`` refuses (keys that must agree; a value asking more than the machine holds).
        engine.registry.UnknownTypeError: a ``type`` that is not registered (lists the registered ones).
    """
    if not isinstance(main_config, Mapping):
        raise ConfigError(f"main_config must be a dict, got {type(main_config).__name__}")
    main_config = plain(main_config)
    create_config = plain(create_config or {})
    _check_create_config(create_config)

    user_policy = dict(main_config.get("policy", {}))
    user_env = dict(main_config.get("env", {}))
    policy_type = _type_name(create_config, main_config, "policy")
    env_type = _type_name(create_config, main_config, "env")
    imported, recorded = _import_names(main_config, create_config)
    try:
        policy_cls = POLICY_REGISTRY.get(policy_type)
        env_cls = ENV_REGISTRY.get(env_type)
    except UnknownTypeError as err:
        raise _with_saved_modules(err, recorded) from None

    defaults = base_config()
    defaults["policy"] = dict(type=policy_type, **_without(policy_cls.default_config(), "type"))
    defaults["env"] = dict(type=env_type, **_without(env_cls.default_config(), "type"))
    if "env_manager" in create_config:
        defaults["env"].setdefault("manager", {})  # an env type without ``data.envs.EnvParams``' keys
        defaults["env"]["manager"] = deep_merge(defaults["env"]["manager"],
                                                create_config["env_manager"], path="create_config.env_manager")
    user_policy.pop("type", None)
    user_env.pop("type", None)
    if hasattr(policy_cls, "check_user_keys"):  # keys the policy refuses by name, before they read as unknown
        policy_cls.check_user_keys(policy_type, user_policy)
    user = dict(main_config, policy=user_policy, env=user_env)
    merged = deep_merge(defaults, user, path="")
    merged["import_names"] = imported + recorded
    if seed is not None:
        merged["seed"] = int(seed)
    if exp_name is not None:
        merged["exp_name"] = str(exp_name)
    if not merged["exp_name"]:
        raise ConfigError("exp_name must be a non-empty path")
    cfg = EasyDict(merged)
    check_values(cfg, env_cls)
    for owner in (env_cls, policy_cls):  # each type's checks that span keys (or ask what the machine holds)
        if hasattr(owner, "check_config"):
            owner.check_config(cfg)
    if save:
        save_config(cfg)
    return cfg


def _import_names(main_config: Mapping[str, Any], create_config: Mapping[str, Any]) -> Tuple[List[str], List[str]]:
    """``(imported, recorded)``: the modules ``create_config.policy``/``.env``'s ``import_names`` name (a config file
    of the user's, code they run), imported here, and those only the compiled config's own ``import_names`` (a saved
    ``config.json``'s) names, each once, in order. Those of a ``config.json`` are recorded, never imported: a run
    directory is data, and nothing read from it runs (a module file beside it, on the path, would run as it was
    imported); whoever reads a run of their own algorithm imports its module first (``baton eval --import``;
    ``_with_saved_modules``)."""
    imported: List[str] = []
    for registry, modules in ((POLICY_REGISTRY, create_config.get("policy", {}).get("import_names", [])),
                              (ENV_REGISTRY, create_config.get("env", {}).get("import_names", []))):
        new = [module for module in modules if module not in imported]
        registry.import_modules(new)
        imported.extend(new)
    saved = main_config.get("import_names") or []
    if not isinstance(saved, list) or not all(isinstance(module, str) for module in saved):
        raise ConfigError(f"import_names must be a list of module names, got {saved!r}")
    return imported, [module for module in saved if module not in imported]


def _with_saved_modules(err: UnknownTypeError, recorded: List[str]) -> Exception:
    """``err`` (a type no module imported so far registers), naming the modules a saved ``config.json`` records
    (``recorded``) that this process has not imported, and how to import them (``_import_names``: baton imports none
    of a run's own)."""
    missing = [module for module in recorded if module not in sys.modules]
    if not missing:
        return err
    return UnknownTypeError(f"{err}. The run records the module(s) {', '.join(map(repr, missing))} "
                            f"(its config.json's import_names), which baton never imports from a run's files (nothing "
                            f"read from a run directory runs): import them yourself first (baton eval/export "
                            f"--import {missing[0]}; in Python, import {missing[0]} before load_saved_run)")


def save_config(cfg: Mapping[str, Any]) -> str:
    """Write ``cfg`` to ``<exp_name>/config.json`` atomically and return the path."""
    return atomic_write_json(os.path.join(cfg["exp_name"], CONFIG_FILE), plain(cfg))


def check_values(cfg: Mapping[str, Any], env_cls: Any = None) -> None:
    """Refuse values of the run's keys and of the sections beside ``policy`` that would not run or fail deep
    inside a run, naming the key and the fix (``run_rules``); ``compile_config`` then asks the policy class for
    its section.

    Raises:
        ConfigError: e.g. a count of 0, a word its key does not take, a negative seed.
    """
    run_rules(env_cls).check(cfg)
    seed = cfg.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"seed={seed!r}: a seed is a whole number >= 0 (gymnasium's envs refuse negative ones): "
                          f"give --seed N or seed=N with N >= 0")


# ---- helpers ---------------------------------------------------------------------------------------
def _without(d: Mapping[str, Any], *keys: str) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def _type_name(create_config: Mapping[str, Any], main_config: Mapping[str, Any], section: str) -> str:
    name = create_config.get(section, {}).get("type") or main_config.get(section, {}).get("type")
    if not name:
        raise ConfigError(f"create_config.{section}.type is missing: name the registered {section} type, "
                          f"e.g. create_config = dict({section}=dict(type=...))")
    if not isinstance(name, str):
        raise ConfigError(f"create_config.{section}.type must be a str, got {type(name).__name__}")
    return name


def _check_create_config(create_config: Mapping[str, Any]) -> None:
    for section, value in create_config.items():
        if section not in _CREATE_KEYS:
            raise ConfigError(unknown_key_message(f"create_config.{section}", section,
                                                   {k: None for k in _CREATE_KEYS}))
        if not isinstance(value, Mapping):
            raise ConfigError(f"create_config.{section} must be a dict, got {type(value).__name__}")
        for key in value:
            if key not in _CREATE_KEYS[section]:
                raise ConfigError(unknown_key_message(f"create_config.{section}.{key}", key,
                                                       {k: None for k in _CREATE_KEYS[section]}))


