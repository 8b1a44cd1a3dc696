"""docs/architecture.md, "Adding an algorithm": a policy written in a file of its own, outside the package,
trains through the standard pipeline with nothing else changed (its config rules, its shape, its checkpoint,
its row of --list-algos all come from the class)."""
from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from easydict import EasyDict

from commands.class_facts import declared_facts
from engine.config import ConfigError
from engine.params import section
from pipelines import build_pipeline
from policies.base import PolicyParams
from tiny_q import TinyQLearn, TinyQModel

MODULE = "tiny_q"  # tests/policies/tiny_q.py, importable as the test files' directory is on the path


@dataclass
class BareParams(PolicyParams):
    """A ``policy`` section with the algorithm's own keys only, none of those its pipeline reads."""

    model: TinyQModel = section(TinyQModel)
    learn: TinyQLearn = section(TinyQLearn)


def _config(tmp_path, **learn):
    main = EasyDict(dict(exp_name=str(tmp_path / "tiny"), log=dict(progress=False),
                         env=dict(collector_env_num=4, evaluator_env_num=2, n_evaluator_episode=2),
                         policy=dict(learn=learn)))
    create = EasyDict(dict(env=dict(type="cartpole"), policy=dict(type="tiny_q", import_names=[MODULE])))
    return main, create


def test_an_algorithm_in_its_own_file_trains_in_the_standard_pipeline(tmp_path):
    with build_pipeline(_config(tmp_path), max_env_step=1024) as pipeline:
        assert pipeline.names[4:8] == ["exploration", "collector", "pusher", "learner"]
        summary = pipeline.run()
    assert summary["env_step"] >= 1024 and summary["train_iter"] > 0
    assert os.path.isfile(os.path.join(summary["run_dir"], "ckpt", "latest.pth.tar"))
    resumed = build_pipeline(_config(tmp_path), max_env_step=1280, exp_name=summary["run_dir"], resume=True).run()
    assert resumed["train_iter"] > summary["train_iter"]  # its state came back from its checkpoint


def test_its_config_rules_are_its_own_declaration(tmp_path):
    with pytest.raises(ConfigError, match=r"'policy.learn.grad_clip' is -1.0: it must be >= 0"):
        build_pipeline(_config(tmp_path, grad_clip=-1.0), max_env_step=64)
    assert not (tmp_path / "tiny_seed0").exists()


def test_list_algos_reads_its_class():
    assert declared_facts(f"{MODULE}:TinyQPolicy", "tiny_q", ("pipeline", "action_spaces")) == {
        "pipeline": "off_policy", "action_spaces": ("discrete",)}
    assert declared_facts(MODULE, "tiny_q", ("pipeline",)) == {"pipeline": "off_policy"}


def test_its_saved_run_names_its_module_and_loads_once_the_user_imports_it(tmp_path, monkeypatch, capsys):
    """``baton eval`` / ``baton export`` / ``load_saved_run`` read the run's config.json, which records the module
    of ``create_config.policy.import_names`` (``import_names``) but is never imported from: nothing read from a run
    directory runs. A process that has not imported it is told which module to import and how (``--import``);
    imported, the run loads. A module file planted beside a shared run directory does not run."""
    import json
    import sys

    from commands import load_saved_run
    from commands.cli import main
    from engine.registry import POLICY_REGISTRY, UnknownTypeError

    summary = build_pipeline(_config(tmp_path), max_env_step=256).run()
    run_dir = summary["run_dir"]
    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["import_names"] == [MODULE]
    policy_cls = POLICY_REGISTRY.get("tiny_q")
    monkeypatch.delitem(POLICY_REGISTRY._items, "tiny_q")  # as in a fresh `baton eval` process
    monkeypatch.delitem(sys.modules, MODULE)
    with pytest.raises(UnknownTypeError, match=rf"unknown policy type 'tiny_q'.*records the module\(s\) '{MODULE}'.*"
                                               rf"--import {MODULE}"):
        load_saved_run(run_dir, "latest")
    assert main(["eval", run_dir, "--episodes", "1"]) == 2
    assert f"--import {MODULE}" in capsys.readouterr().err
    assert main(["eval", run_dir, "--episodes", "1", "--import", MODULE]) == 0  # the user's word: imported
    assert type(load_saved_run(run_dir, "latest").policy).__name__ == policy_cls.__name__

    (tmp_path / "planted.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with open(os.path.join(run_dir, "config.json"), "w") as f:  # a shared run directory naming a module of its own
        json.dump(dict(cfg, import_names=["planted"]), f)
    load_saved_run(run_dir, "latest")
    assert not (tmp_path / "ran").exists() and "planted" not in sys.modules
    assert main(["eval", run_dir, "--episodes", "1", "--import", "no_such_module_of_the_user"]) == 2
    assert "--import: cannot import 'no_such_module_of_the_user'" in capsys.readouterr().err


def test_algo_module_colon_name_trains_it_from_defaults(tmp_path, monkeypatch):
    """``--algo MODULE:NAME`` (as ``--env module:EnvId-v0``): the module is imported and recorded, so every rank and
    the run's config.json find the algorithm; a bad module is one line naming PYTHONPATH."""
    from commands.algo_env import build_config
    from commands.cli import main

    main_cfg, create = build_config(f"{MODULE}:tiny_q", "CartPole-v1")
    assert create["policy"] == {"type": "tiny_q", "import_names": [MODULE]}
    assert main_cfg["exp_name"] == "tiny_q_CartPole-v1"
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--algo", f"{MODULE}:tiny_q", "--env", "CartPole-v1", "--max-env-step", "256",
                 "--no-progress"]) == 0
    assert os.path.isfile(tmp_path / "tiny_q_CartPole-v1_seed0" / "ckpt" / "latest.pth.tar")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module'.*PYTHONPATH"):
        build_config("no_such_module:tiny_q", "CartPole-v1")


@pytest.mark.parametrize("pipeline,missing", [
    ("off_policy", r"policy.eval.evaluator.eval_freq, .*policy.collect.n_sample, policy.other.replay_buffer, "),
    ("on_policy", r"policy.eval.evaluator.eval_freq, .*policy.learn.epoch_per_collect and a _value\(obs\) method"),
])
def test_a_params_without_the_keys_its_pipeline_reads_is_refused_naming_them(pipeline, missing, tmp_path,
                                                                             monkeypatch):
    """The standard pipeline reads some keys of every algorithm's ``policy`` section (``Shape.policy_keys``): an
    algorithm whose ``Params`` lacks one is refused at build, naming each, not an AttributeError mid-assembly."""
    from engine.registry import POLICY_REGISTRY
    from tiny_q import TinyQPolicy

    bare = type("BarePolicy", (TinyQPolicy,), {"Params": BareParams, "pipeline": pipeline})
    monkeypatch.setitem(POLICY_REGISTRY._items, "tiny_q", bare)
    with pytest.raises(ConfigError, match=rf"BarePolicy.*declares no {missing}"):
        build_pipeline(_config(tmp_path), max_env_step=64)
    assert not (tmp_path / "tiny_seed0").exists()
