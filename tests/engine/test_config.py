from __future__ import annotations

import json
import os

import pytest
from easydict import EasyDict

from engine import ConfigError, compile_config
from engine.registry import UnknownTypeError

CREATE = dict(env=dict(type="cartpole"), policy=dict(type="dqn"))


def _main(tmp_path, **policy):
    return dict(exp_name=str(tmp_path / "exp"), env=dict(stop_value=100), policy=policy)


def test_compile_config_merges_defaults_under_user_values(tmp_path):
    cfg = compile_config(_main(tmp_path, learn=dict(batch_size=32)), CREATE)
    assert isinstance(cfg, EasyDict)
    assert cfg.policy.learn.batch_size == 32
    assert cfg.policy.learn.learning_rate == 1e-3  # default kept
    assert cfg.env.stop_value == 100 and cfg.env.env_id == "CartPole-v1"
    assert cfg.policy.type == "dqn" and cfg.env.type == "cartpole" and cfg.env.manager.type == "sync"


def test_compile_config_saves_compiled_config_in_exp_dir(tmp_path):
    cfg = compile_config(_main(tmp_path), CREATE)
    with open(os.path.join(cfg.exp_name, "config.json")) as f:
        saved = json.load(f)
    assert saved["policy"]["learn"]["batch_size"] == cfg.policy.learn.batch_size


def test_compile_config_exp_name_is_relative_to_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    compile_config(dict(exp_name="rel_exp"), CREATE)
    assert (tmp_path / "rel_exp" / "config.json").is_file()


def test_unknown_key_names_full_path_and_closest_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        compile_config(_main(tmp_path, learn=dict(learning_rat=0.1)), CREATE, save=False)
    msg = str(err.value)
    assert "policy.learn.learning_rat" in msg and "policy.learn.learning_rate" in msg


def test_unknown_top_level_key(tmp_path):
    with pytest.raises(ConfigError, match="'polcy'.*'policy'"):
        compile_config(dict(exp_name=str(tmp_path), polcy=dict()), CREATE, save=False)


@pytest.mark.parametrize("path,value,expect", [
    (("learn", "batch_size"), "64", "expects int"),
    (("learn", "batch_size"), 64.0, "expects int"),
    (("learn", "learning_rate"), "fast", "expects float"),
    (("learn", "double_q"), 1, "expects bool"),
    (("model", "encoder_hidden_size_list"), 64, "expects list"),
    (("learn",), 3, "must be a dict"),
])
def test_wrong_type_names_field_and_both_types(tmp_path, path, value, expect):
    policy = {}
    node = policy
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with pytest.raises(ConfigError) as err:
        compile_config(_main(tmp_path, **policy), CREATE, save=False)
    msg = str(err.value)
    assert "policy." + ".".join(path) in msg and expect in msg and type(value).__name__ in msg


@pytest.mark.parametrize("given, says", [
    ("object", r"give env\.env_id='CartPole-v1'"),
    ("class", r"register it on import, gymnasium\.register\(id='CartPoleEnv-v0', entry_point=CartPoleEnv\), and "
              r"give env\.env_id='your_module:CartPoleEnv-v0'")])
def test_an_env_class_or_object_for_the_env_id_says_what_to_give(tmp_path, given, says):
    """SB3 takes an env object; a config names an env by an id every rank and env worker can make: the id the
    object was made from, or a class registered by a module of the user's."""
    import gymnasium as gym
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    main = _main(tmp_path)
    main["env"] = dict(main.get("env", {}), env_id=gym.make("CartPole-v1") if given == "object" else CartPoleEnv)
    with pytest.raises(ConfigError, match=r"env\.env_id.*" + says):
        compile_config(main, CREATE, save=False)


def test_int_accepted_for_float(tmp_path):
    cfg = compile_config(_main(tmp_path, learn=dict(learning_rate=1)), CREATE, save=False)
    assert cfg.policy.learn.learning_rate == 1


def test_unknown_policy_type_lists_registered(tmp_path):
    with pytest.raises(UnknownTypeError, match="'dqnn'.*dqn"):
        compile_config(_main(tmp_path), dict(env=dict(type="cartpole"), policy=dict(type="dqnn")), save=False)


def test_unknown_env_type_lists_registered(tmp_path):
    with pytest.raises(UnknownTypeError, match="'cartpol'.*cartpole"):
        compile_config(_main(tmp_path), dict(env=dict(type="cartpol"), policy=dict(type="dqn")), save=False)


def test_missing_type_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="create_config.policy.type"):
        compile_config(_main(tmp_path), dict(env=dict(type="cartpole")), save=False)


def test_unknown_create_config_key(tmp_path):
    with pytest.raises(ConfigError, match="create_config.env_manger.*env_manager"):
        compile_config(_main(tmp_path), dict(CREATE, env_manger=dict(type="sync")), save=False)


def test_import_names_are_imported(tmp_path):
    create = dict(env=dict(type="cartpole", import_names=["dizoo.classic_control.cartpole.envs"]),
                  policy=dict(type="dqn"))
    assert compile_config(_main(tmp_path), create, save=False).env.type == "cartpole"
    with pytest.raises(ImportError, match="no_such_module"):
        compile_config(_main(tmp_path), dict(env=dict(type="cartpole", import_names=["no_such_module"]),
                                             policy=dict(type="dqn")), save=False)


def test_seed_and_exp_name_overrides(tmp_path):
    cfg = compile_config(_main(tmp_path), CREATE, seed=7, exp_name=str(tmp_path / "other"), save=False)
    assert cfg.seed == 7 and cfg.exp_name.endswith("other")


def test_env_manager_from_create_config(tmp_path):
    cfg = compile_config(_main(tmp_path), dict(CREATE, env_manager=dict(type="async")), save=False)
    assert cfg.env.manager.type == "async"


def test_free_form_empty_default_accepts_any_keys(tmp_path):
    cfg = compile_config(_main(tmp_path) | dict(env=dict(env_kwargs=dict(render_mode=None))), CREATE, save=False)
    assert cfg.env.env_kwargs == {"render_mode": None}


def test_engine_import_is_light():
    import subprocess
    import sys
    code = "import engine, sys; print(any(m in sys.modules for m in ('torch', 'gymnasium', 'tensorboardX')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("main,meant", [
    (dict(batch_size=64), "did you mean 'policy.learn.batch_size'"),  # at the top: the key one level down
    (dict(policy=dict(batch_size=64)), "did you mean 'policy.learn.batch_size'"),
    (dict(learn=dict(batch_size=64)), "did you mean 'policy.learn'"),
    (dict(env=dict(seed=1)), "did you mean 'seed'"),
])
def test_a_key_at_the_wrong_depth_names_its_full_path(main, meant, tmp_path):
    with pytest.raises(ConfigError, match=meant):
        compile_config(dict(main, exp_name=str(tmp_path)), CREATE, save=False)


@pytest.mark.parametrize("path,value,message", [
    (("policy", "learn", "td_loss"), "foo", r"policy.learn.td_loss='foo' is not one of 'huber', 'mse'$"),
    (("policy", "learn", "td_loss"), "hubber", r"is not one of 'huber', 'mse' \(did you mean 'huber'\?\)"),
    (("policy", "other", "eps", "type"), "linar", r"policy.other.eps.type='linar'.*did you mean 'linear'"),
    (("env", "manager", "type"), "asyn", r"env.manager.type='asyn'.*did you mean 'async'"),
    (("policy", "model", "encoder_hidden_size_list"), [], r"encoder_hidden_size_list' is \[\]: name at least one"),
    (("policy", "other", "eps", "decay"), 0, r"'policy.other.eps.decay' is 0: it must be at least 1"),
])
def test_a_value_the_policy_or_env_would_refuse_is_refused_at_compile_time(path, value, message, tmp_path):
    main = dict(exp_name=str(tmp_path))
    node = main
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=message):
        compile_config(main, CREATE, save=False)


def test_value_rules_doctests_run():
    import doctest

    import engine.config_rules

    assert doctest.testmod(engine.config_rules).failed == 0


def test_engine_names_no_algorithm_key():
    """Each key's rules live with the code that reads it (issue 30): the engine checks the run's own keys and
    asks each section's reader for the rest."""
    import engine.config as config

    rules = config.run_rules()
    for rule in ("at_least_one", "positive", "not_negative", "unit_interval"):
        assert not [key for key in getattr(rules, rule) if key.startswith("policy.")]
    assert not [key for key in rules.choices if key.startswith("policy.")]
    source = open(config.__file__, encoding="utf-8").read()
    for algorithm_key in ("cql_alpha", "td_loss", "actor_update_freq", "rnn_type", "seq_len", "epoch_per_collect"):
        assert algorithm_key not in source, algorithm_key
    # nor a key of the sections the floors above read: they declare them (engine.params)
    for section_key in ("bucket_cap_mb", "latest_every_s", "save_replay_buffer", "tensorboard", "collector_env_num",
                        "grace_s"):
        assert section_key not in source, section_key
