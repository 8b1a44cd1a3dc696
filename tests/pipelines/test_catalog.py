"""The static tables of ``--list-algos`` / ``--list-envs`` (commands/catalog.py) say what the registries and
gymnasium say."""
from __future__ import annotations

import re
from importlib import metadata

import gymnasium as gym
import pytest

from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from commands import catalog
from commands.algo_env import algo_support


def _entry_point_names(group):
    return sorted(ep.name for ep in metadata.entry_points(group=group))


def test_catalog_algos_match_the_policy_registry():
    assert sorted(catalog.ALGOS) == _entry_point_names("baton.policies")
    assert set(catalog.ALGOS) <= set(POLICY_REGISTRY.names())
    for name, row in catalog.ALGOS.items():
        assert algo_support(name) == {"discrete": row.discrete, "continuous": row.continuous}, name
        assert POLICY_REGISTRY.get(name).pipeline == row.pipeline, name


def test_catalog_env_families_match_the_env_registry():
    assert sorted(catalog.ENV_FAMILIES) == _entry_point_names("baton.envs")
    assert set(catalog.ENV_FAMILIES) <= set(ENV_REGISTRY.names())
    for name, row in catalog.ENV_FAMILIES.items():
        env_type = ENV_REGISTRY.get(name)
        if name == catalog.ATARI_TYPE:  # any game, in either of the two forms of id the row names
            assert re.fullmatch(r"ALE/\w+-v5|\w+NoFrameskip-v4", env_type.default_config()["env_id"])
            assert "ALE/<Game>-v5" in row.ids and "<Game>NoFrameskip-v4" in row.ids
        else:
            assert row.ids == env_type.env_id, name


def _fits_env(env_id):
    """Whether ``--env`` takes the id (flat Box observation, Discrete or Box actions); None: not makeable here."""
    try:
        env = gym.make(env_id)
    except (ImportError, gym.error.Error):
        return None
    try:
        obs, act = env.observation_space, env.action_space
    finally:
        env.close()
    return isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1 and isinstance(act, (gym.spaces.Discrete,
                                                                                          gym.spaces.Box))


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


def test_catalog_lists_a_declared_name_without_a_row(monkeypatch):
    """A name an entry point declares (another package's policy) is listed without importing it."""
    monkeypatch.delitem(catalog.ALGOS, "dqn")
    monkeypatch.delitem(catalog.ENV_FAMILIES, "pendulum")
    assert "dqn       ?         ?           ? (policies.dqn)" in catalog.describe_algos()
    assert "pendulum     ? (dizoo.classic_control.pendulum.envs)" in catalog.describe_envs()


@pytest.mark.parametrize("installed", [True, False])
def test_catalog_says_whether_an_extra_is_installed(installed, monkeypatch):
    monkeypatch.setitem(catalog._EXTRA_PROVIDES, "box2d", "json" if installed else "no_such_module_for_baton")
    line = next(line for line in catalog.describe_envs().splitlines() if "lunarlander" in line)
    assert line.endswith("(extra: .[box2d])" if installed else "(extra: .[box2d], not installed)")


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
