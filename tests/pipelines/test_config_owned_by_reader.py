"""Each config key is declared once, by the code that reads it (issue 30, part 5): every policy's and env
type's section is a typed ``Params`` with a docstring per key, the code reads the typed section, and
``baton train --explain`` prints the declaration."""
from __future__ import annotations

import ast
import os

import pytest

from commands.cli import main
from commands.explain import explain
from engine.config import ConfigError, config_sections
from policies.defaults import PolicyParams
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE_DQN = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
LIBRARY = ("engine", "data", "middleware", "policies", "pipelines")


@pytest.mark.parametrize("name", POLICY_REGISTRY.names())
def test_each_policy_declares_its_section_with_a_docstring_per_key(name):
    cls = POLICY_REGISTRY.get(name)
    assert issubclass(cls.Params, PolicyParams) and cls.Params is not PolicyParams
    undocumented = [path for path, doc in cls.Params.field_docs("policy").items() if not doc]
    assert not undocumented, undocumented
    assert cls.default_config() == {k: v for k, v in cls.Params.defaults().items() if k != "type"}


@pytest.mark.parametrize("name", ENV_REGISTRY.names())
def test_each_env_type_declares_its_section_with_a_docstring_per_key(name):
    env_type = ENV_REGISTRY.get(name)
    sections = config_sections(env_cls=env_type)
    assert "env" in sections, f"env type {name!r} declares no Params"
    undocumented = [path for path, doc in sections["env"].field_docs("env").items() if not doc]
    assert not undocumented, undocumented
    assert sections["env"].of(env_type.default_config(), "env").to_dict() == env_type.default_config()


def test_the_library_reads_no_policy_key_of_the_untyped_config():
    """Policies read ``self.params``; the stages read the built policy's typed section: no ``cfg["learn"]`` or
    ``cfg.get("nstep", ...)`` reads of a policy key survive (``resolve_shape`` records the env's shapes into
    the config's ``model`` section, which it is given as a dict)."""
    offenders = []
    for package in LIBRARY:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for file in files:
                if not file.endswith(".py"):
                    continue
                path = os.path.join(folder, file)
                for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                            and node.slice.value in ("learn", "collect", "other", "eval", "learn_mode") \
                            and isinstance(node.value, ast.Name) and node.value.id in ("cfg", "pcfg", "policy_cfg"):
                        offenders.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_explain_prints_the_declaration_and_this_config_s_value():
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

    text = explain("policy.learn.batch_size", main_config, create_config)
    assert text.startswith("policy.learn.batch_size  (int; default 64") and ">= 1" in text
    assert "Transitions per update." in text
    section = explain("ckpt", main_config, create_config)
    assert [line.split()[0] for line in section.splitlines() if not line.startswith(" ")] == [
        "ckpt.save_freq", "ckpt.latest_every_s", "ckpt.save_replay_buffer"]
    with pytest.raises(ConfigError, match=r"--explain 'batchsize': no such config key or section; did you mean "
                                          r"'policy.learn.batch_size'"):
        explain("batchsize", main_config, create_config)


def test_baton_train_explain_trains_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "-c", CARTPOLE_DQN, "--explain", "env.collector_env_num", "env.collector_env_num=4"]) == 0
    out = capsys.readouterr().out
    assert "env.collector_env_num  (int; default 8; this config: 4; >= 1)" in out
    assert os.listdir(tmp_path) == []
    assert main(["train", "-c", CARTPOLE_DQN, "--explain", "policy.lern"]) == 2
    assert "did you mean 'policy.learn'" in capsys.readouterr().err


def test_the_env_is_named_with_its_type_where_the_id_alone_would_mislead():
    """``baton eval`` of a masked-CartPole run says so (issue 34), not a bare ``CartPole-v1``."""
    import doctest

    from pipelines import stages

    assert doctest.testmod(stages).failed == 0 and doctest.testmod(stages).attempted >= 2
    assert stages.env_label({"env": {"type": "atari", "env_id": "PongNoFrameskip-v4"}}) == \
        "PongNoFrameskip-v4 (env type atari)"
    assert stages.env_label({"env": {"type": "gym", "env_id": "Acrobot-v1"}}) == "Acrobot-v1"
    assert stages.env_label({"env": {"type": "hopper", "env_id": "Hopper-v5"}}) == "Hopper-v5"
