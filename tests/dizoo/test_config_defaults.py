"""Every dizoo config states only what differs from the defaults, so a reader sees what the experiment changes.

The defaults are what ``compile_config`` merges under a config: ``base_config()``, the policy's and the env
type's ``default_config()`` and the default env manager. They are read here by compiling an empty
``main_config`` with the config's own ``create_config``, so this test follows ``compile_config`` as it is.
"""
from __future__ import annotations

import glob
import importlib
import os
from typing import Any, Iterator, Mapping, Tuple

import pytest
from easydict import EasyDict

from engine.config import compile_config

DIZOO_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "dizoo")
REPO_ROOT = os.path.dirname(DIZOO_ROOT)
CONFIGS = sorted(os.path.relpath(p, REPO_ROOT).replace(os.sep, "/")
                 for p in glob.glob(os.path.join(DIZOO_ROOT, "**", "config", "**", "*_config.py"), recursive=True))
NAMES_THE_RUN = {"exp_name"}
DERIVED_FROM_ENV = {"policy.model.obs_shape", "policy.model.action_shape"}  # None: taken from the env's spaces
_ABSENT = object()


def _leaves(config: Mapping[str, Any], defaults: Any, prefix: str = "") -> Iterator[Tuple[str, Any, Any]]:
    """(key path, stated value, default or _ABSENT) for every value ``config`` states; a section (a dict
    whose default is a non-empty dict) is walked into, so an empty section states nothing."""
    for key, value in config.items():
        path = f"{prefix}{key}"
        default = defaults.get(key, _ABSENT) if isinstance(defaults, Mapping) else _ABSENT
        if isinstance(value, Mapping) and isinstance(default, Mapping) and default:
            yield from _leaves(value, default, path + ".")
        else:
            yield path, value, default


def _same(value: Any, default: Any) -> bool:
    """Equal as config values: 195 and 195.0 are the same number, True and 1 are not."""
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default) and value == default
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return len(value) == len(default) and all(_same(v, d) for v, d in zip(value, default))
    return value == default


def restated_defaults(name: str, main_config: Mapping[str, Any], create_config: Mapping[str, Any]) -> list:
    """One message per value in ``main_config`` or ``create_config.env_manager`` that is the default."""
    create = {k: v for k, v in create_config.items() if k != "env_manager"}
    defaults = compile_config({}, create, save=False)
    problems = []
    for path, value, default in _leaves(main_config, defaults):
        if path in DERIVED_FROM_ENV:
            problems.append(f"{name} states {path}={value!r}, which is taken from the env's spaces: remove it")
        elif path not in NAMES_THE_RUN and default is not _ABSENT and _same(value, default):
            problems.append(f"{name} states {path}={value!r}, which is the default: remove it")
    manager = create_config.get("env_manager", {})
    for path, value, default in _leaves(manager, defaults.env.manager, "create_config.env_manager."):
        if _same(value, default):
            problems.append(f"{name} states {path}={value!r}, which is the default: remove it")
    return problems


@pytest.mark.parametrize("name", CONFIGS, ids=[os.path.basename(p) for p in CONFIGS])
def test_dizoo_config_states_only_what_differs_from_defaults(name):
    module = importlib.import_module(name[:-len(".py")].replace("/", "."))
    problems = restated_defaults(name, module.main_config, module.create_config)
    assert not problems, "\n".join(problems)


def test_restated_defaults_names_file_and_key_path():
    main = EasyDict(dict(exp_name="x", env=dict(stop_value=475), policy=dict(
        nstep=1, cuda=True, model=dict(obs_shape=4, dueling=False), learn=dict(double_q=1))))
    create = dict(env=dict(type="cartpole"), policy=dict(type="dqn"), env_manager=dict(type="sync"))
    assert restated_defaults("dizoo/x_config.py", main, create) == [
        "dizoo/x_config.py states env.stop_value=475, which is the default: remove it",
        "dizoo/x_config.py states policy.nstep=1, which is the default: remove it",
        "dizoo/x_config.py states policy.model.obs_shape=4, which is taken from the env's spaces: remove it",
        "dizoo/x_config.py states create_config.env_manager.type='sync', which is the default: remove it",
    ]


def test_dizoo_configs_are_found():
    assert len(CONFIGS) >= 10 and all(p.startswith("dizoo/") for p in CONFIGS)
