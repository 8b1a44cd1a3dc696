"""The static tables of ``--list-algos`` / ``--list-envs`` (commands/catalog.py) say what the registries and
gymnasium say."""
from __future__ import annotations

import doctest
import re
from importlib import metadata

import gymnasium as gym
import pytest

from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from commands import catalog, class_facts
from commands.algo_env import algo_support
from commands.class_facts import declared_facts


def _entry_point_names(group):
    return sorted(ep.name for ep in metadata.entry_points(group=group))


def test_each_algorithm_is_described_by_what_its_class_declares():
    """--list-algos reads each registered class's ``pipeline`` and ``action_spaces`` from its source: the same
    as the imported class says, and the action spaces are those it builds on."""
    points = {ep.name: ep.value for ep in metadata.entry_points(group="baton.policies")}
    assert set(points) <= set(POLICY_REGISTRY.names())
    for name, target in points.items():
        cls = POLICY_REGISTRY.get(name)
        facts = declared_facts(target, name, ("pipeline", "action_spaces", "multi_agent"))
        assert facts == {"pipeline": cls.pipeline, "action_spaces": cls.action_spaces,
                         "multi_agent": cls.multi_agent}, name
        assert algo_support(name) == {kind: kind in cls.action_spaces for kind in ("discrete", "continuous")}, name
        yes = 'yes' if 'discrete' in cls.action_spaces else 'no'
        continuous = 'yes' if 'continuous' in cls.action_spaces else 'no'
        agents = 'several' if cls.multi_agent else 'one'
        assert f"{name:<9} {yes:<9} {continuous:<11} {agents:<8} {cls.pipeline.replace('_', '-')}" in \
            catalog.describe_algos()


def test_catalog_env_families_match_the_env_registry():
    # every registered family has its row; the any-gymnasium-id type ("gym") has a line of its own
    assert sorted(catalog.ENV_FAMILIES) == [n for n in _entry_point_names("baton.envs") if n != catalog.GYM_TYPE]
    assert set(catalog.ENV_FAMILIES) <= set(ENV_REGISTRY.names())
    for name, row in catalog.ENV_FAMILIES.items():
        env_type = ENV_REGISTRY.get(name)
        if name == catalog.ATARI_TYPE:  # any game, in either of the two forms of id the row names
            assert re.fullmatch(r"ALE/\w+-v5|\w+NoFrameskip-v4", env_type.default_config()["env_id"])
            assert "ALE/<Game>-v5" in row.ids and "<Game>NoFrameskip-v4" in row.ids
        elif getattr(env_type, "entry_point_prefix", None) or name == "pettingzoo":  # any id of a package, or any
            # PettingZoo module: its default named
            assert row.ids.startswith("any ") and env_type.env_id in row.ids, name
        else:
            assert row.ids == env_type.env_id, name


def _fits_env(env_id):
    """Whether ``--env`` takes the id (a flat Box, or as the generic type makes it a Dict/Tuple observation;
    Discrete or Box actions); None: not makeable here."""
    from data.action_masks import as_trainable

    try:
        env = as_trainable(gym.make(env_id))
    except (ImportError, gym.error.Error):
        return None
    try:
        obs, act = env.observation_space, env.action_space
    finally:
        env.close()
    takes = (isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1) or isinstance(obs, (gym.spaces.Dict,
                                                                                          gym.spaces.Tuple))
    return takes and isinstance(act, (gym.spaces.Discrete, gym.spaces.Box))


def test_catalog_gym_ids_are_gymnasiums_envs_that_fit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # gym.make of a MuJoCo task, outside baton's env type, writes MUJOCO_LOG.TXT here
    listed = [env_id for ids in catalog.GYM_IDS.values() for env_id in ids]
    assert all(env_id in gym.registry for env_id in listed)
    newest = {}
    for env_id, spec in gym.registry.items():
        if isinstance(spec.entry_point, str) and spec.entry_point.startswith("gymnasium.envs.") and spec.namespace is None:
            newest[spec.name] = max(newest.get(spec.name, spec), spec, key=lambda s: s.version or 0)
    for spec in newest.values():
        fits = _fits_env(spec.id)
        assert fits is None or fits == (spec.id in listed), f"{spec.id}: fits --env: {fits}, listed: {spec.id in listed}"
    for extra, ids in catalog.GYM_IDS.items():
        assert extra is None or extra in catalog._EXTRA_PROVIDES
        if extra is None:  # no extra: each one makes here
            assert all(_fits_env(env_id) for env_id in ids)


def test_catalog_lists_a_declared_name_it_cannot_read(monkeypatch):
    """A name an entry point declares whose source cannot be read (another package's policy, installed without
    its sources) is listed with question marks, without importing it."""
    monkeypatch.setattr(catalog, "declared_facts", lambda target, name, facts: None if name == "dqn" else
                        declared_facts(target, name, facts))
    monkeypatch.delitem(catalog.ENV_FAMILIES, "pendulum")
    assert "dqn       ?         ?           ?        ? (policies.dqn)" in catalog.describe_algos()
    assert "ppo       yes       yes         one      on-policy" in catalog.describe_algos()
    assert "pendulum     ? (dizoo.classic_control.pendulum.envs)" in catalog.describe_envs()


def test_class_facts_follow_the_bases_and_the_imports():
    """Rainbow declares neither fact (DQN's, two modules away); a2c is the second class of its module."""
    assert declared_facts("policies.rainbow", "rainbow", ["pipeline", "action_spaces"]) == {
        "pipeline": "off_policy", "action_spaces": ("discrete",)}
    assert declared_facts("policies.a2c", "a2c", ["pipeline"]) == {"pipeline": "on_policy"}
    assert declared_facts("policies.ppo", "no_such_algo", ["pipeline"]) is None
    assert declared_facts("no_such_package.module", "dqn", ["pipeline"]) is None
    assert doctest.testmod(class_facts).failed == 0


@pytest.mark.parametrize("installed", [True, False])
def test_catalog_says_whether_an_extra_is_installed(installed, monkeypatch):
    monkeypatch.setitem(catalog._EXTRA_PROVIDES, "box2d", "json" if installed else "no_such_module_for_baton")
    line = next(line for line in catalog.describe_envs().splitlines() if "lunarlander" in line)
    assert line.endswith("(extra: .[box2d])" if installed else "(extra: .[box2d], not installed)")


def test_catalog_lists_the_any_id_type_once_in_its_own_words():
    lines = catalog.describe_envs().splitlines()
    gym_lines = [line for line in lines if line.split()[:1] == [catalog.GYM_TYPE]]
    assert len(gym_lines) == 1 and "any other gymnasium id" in gym_lines[0] and "?" not in gym_lines[0]


def test_catalog_torch_envs_are_registered_batched_types_that_build():
    from commands.algo_env import build_config

    for name, env_id in catalog.TORCH_ENVS.items():
        env_type = ENV_REGISTRY.get(name)
        assert getattr(env_type, "batched", False) and env_type.env_id == env_id
        assert f"{name:<14} {env_id}" in catalog.describe_envs()
    assert sorted(catalog.TORCH_ENVS) == sorted(n for n in ENV_REGISTRY.names()
                                                if getattr(ENV_REGISTRY.get(n), "batched", False))
    main, create = build_config("ppo", "CartPole-torch")
    assert create["env"]["type"] == "cartpole_torch" and main["env"]["env_id"] == "CartPole-torch"


def test_the_catalog_names_the_any_gymnasium_type_as_data_registers_it():
    from data.envs import GYM_TYPE

    assert catalog.GYM_TYPE == GYM_TYPE and ENV_REGISTRY.get(GYM_TYPE).env_id == ""
