"""``KEY=VALUE`` overrides: parsed as the field's type, checked like a config file's keys, and carried by
``baton train``, dizoo scripts and the processes ``--nproc`` starts."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from engine.config import ConfigError
from engine.overrides import apply_overrides, parse_value
from commands import options
from commands.cli import main
from commands.config_file import load_config_file
from commands.options import cli_main, parse_train_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
TINY = ["--max-env-step", "128", "--no-progress", "policy.collect.n_sample=32", "env.evaluator_env_num=1",
        "env.n_evaluator_episode=1"]


@pytest.fixture(scope="module")
def cartpole():
    return load_config_file(CARTPOLE)


@pytest.mark.parametrize("text,default,expected", [
    ("true", False, True), ("No", True, False), ("1", False, True), ("off", True, False),
    ("128", 64, 128), ("1e6", 100000, 1000000), ("1_000", 1, 1000),
    ("3e-4", 1e-3, 3e-4), ("2", 1e-3, 2.0), ("inf", 195.0, math.inf),
    ("mse", "huber", "mse"), ("'a b'", "x", "a b"),
    ("[64,64]", [128], [64, 64]), ("(32,)", [128], [32]),
    ("none", None, None), ("cuda:0", None, "cuda:0"), ("[4]", None, [4]),
    ("1e5", None, 100000), ("2.5", None, 2.5), ("-1.0", None, -1.0),  # Optional[int] counts in exponent form
    ("false", None, False), ("True", None, True), ("yes", None, "yes"),  # Optional[bool]; its check refuses "yes"
    ("none", "cudagraph", "none"), ("None", "compile", "None"),  # a str field's own word (policy.compile=none)
])
def test_parse_value_follows_the_default_type(text, default, expected):
    value = parse_value("k", text, default)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("key,text,default,message", [
    ("policy.learn.batch_size", "abc", 64, r"policy.learn.batch_size='abc'.*expects int \(default 64\)"),
    ("policy.learn.batch_size", "1.5", 64, r"expects int"),
    ("policy.learn.double_q", "maybe", True, r"expects bool.*true/false"),
    ("policy.learn.learning_rate", "fast", 1e-3, r"'fast'.*expects float"),
    ("policy.model.encoder_hidden_size_list", "64", [128], r"expects list.*\[64,64\]"),
    ("policy.cuda", "none", False, r"expects bool.*cannot be None"),
])
def test_parse_value_names_key_value_and_type(key, text, default, message):
    with pytest.raises(ConfigError, match=message):
        parse_value(key, text, default)


def test_a_string_field_takes_none_as_its_word_and_the_config_checks_it(cartpole):
    main_config, create_config = cartpole
    main, _ = apply_overrides(main_config, create_config, ["policy.compile=none", "policy.amp=none"])
    assert main["policy"]["compile"] == "none" and main["policy"]["amp"] == "none"
    with pytest.raises(ConfigError, match="compile"):
        apply_overrides(main_config, create_config, ["policy.compile=null"])


def test_overrides_set_typed_values_in_new_dicts(cartpole):
    main_config, create_config = cartpole
    new_main, new_create = apply_overrides(main_config, create_config, [
        "policy.learn.batch_size=128", "env.stop_value=none", "env.manager.type=async",
        "env.env_kwargs={'render_mode': None}", "policy.learn.batch_size=96"])
    assert new_main["policy"]["learn"]["batch_size"] == 96                     # the last one wins
    assert new_main["policy"]["learn"]["update_per_collect"] == 16             # the file's keys stay
    assert new_main["env"]["stop_value"] == math.inf                           # none: never stop on evaluation
    assert new_main["env"]["manager"]["type"] == "async"
    assert new_main["env"]["env_kwargs"] == {"render_mode": None}              # free-form section
    assert "batch_size" not in main_config.policy.learn and new_create == {"env": {"type": "cartpole"},
                                                                            "policy": {"type": "dqn"}}


@pytest.mark.parametrize("override,message", [
    ("policy.learn.batch_sz=32", r"unknown config key 'policy.learn.batch_sz'; did you mean 'policy.learn.batch_size'"),
    ("polcy.nstep=3", r"unknown config key 'polcy'; did you mean 'policy'"),
    ("policy.learn.batch_size=0", r"'policy.learn.batch_size' is 0: it must be at least 1"),
    ("policy.learn=3", r"'policy.learn' is a section"),
    ("policy.learn.batch_size.x=1", r"'policy.learn.batch_size' is a value"),
    ("policy.type=ppo", r"policy type comes from create_config"),
    ("env_manager.type=async", r"write env.manager.type=async"),
    ("env.max_episode_steps=1.5", r"'env.max_episode_steps' expects Optional\[int\] \(default None\), got float: 1.5"),
    ("env.max_episode_steps=100k",
     r"'env.max_episode_steps' is '100k': it must be a number \(write env.max_episode_steps=N\)"),
    ("batch_size", r"write KEY=VALUE"),
])
def test_bad_override_is_named(cartpole, override, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(*cartpole, [override])


def test_overrides_mix_with_options_in_any_order():
    args = parse_train_args(["--local-rank=1", "a.b=1", "--seed", "3", "c.d=x=y", "--no-progress"])
    assert args.overrides == ["a.b=1", "c.d=x=y"] and args.seed == 3 and args.local_rank == 1
    with pytest.raises(SystemExit):
        parse_train_args(["a.b=1", "--bogus"])


def test_cli_run_applies_overrides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "-c", CARTPOLE, "policy.learn.batch_size=32", "--exp-name", str(tmp_path / "r"),
                 "env.stop_value=none", *TINY]) == 0
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["policy"]["learn"]["batch_size"] == 32 and config["env"]["stop_value"] == math.inf
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["env_step"] >= 128


def test_cli_bad_override_is_one_line_exit_2(tmp_path, capsys):
    assert main(["train", "-c", CARTPOLE, "policy.learn.batch_sz=32", "--exp-name", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("baton: unknown config key 'policy.learn.batch_sz'") and "\n" not in err
    assert not (tmp_path / "r").exists()
    with pytest.raises(SystemExit) as exc:
        cli_main(load_config_file(CARTPOLE), ["policy.learn.batch_size=abc"])
    assert exc.value.code == 2 and "expects int" in capsys.readouterr().err


def test_overrides_reach_the_processes_nproc_starts(monkeypatch):
    launched = {}
    monkeypatch.setattr(options, "launch", lambda fn, nprocs, args, **kw: launched.update(nprocs=nprocs, args=args))
    assert main(["train", "-c", CARTPOLE, "--nproc", "2", "policy.learn.batch_size=32"]) == 0
    (main_config, _), _ = launched["args"]
    assert launched["nprocs"] == 2 and main_config["policy"]["learn"]["batch_size"] == 32


def test_dizoo_script_takes_overrides(tmp_path):
    exp = tmp_path / "script_run"
    proc = subprocess.run([sys.executable, CARTPOLE, "policy.learn.batch_size=48", "--exp-name", str(exp), *TINY],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((exp / "config.json").read_text())["policy"]["learn"]["batch_size"] == 48


@pytest.mark.parametrize("override,meant", [
    ("batch_size=128", "did you mean 'policy.learn.batch_size'"),
    ("learn.batch_size=128", "did you mean 'policy.learn.batch_size'"),
    ("policy.batch_size=128", "did you mean 'policy.learn.batch_size'"),
    ("learning_rate=0.1", "did you mean 'policy.learn.learning_rate'"),
])
def test_an_override_at_the_wrong_depth_names_the_full_path(cartpole, override, meant):
    with pytest.raises(ConfigError, match=meant):
        apply_overrides(*cartpole, [override])


@pytest.mark.parametrize("argv,run_dir", [(["seed=3"], "cartpole_dqn_seed3"), (["seed=3", "--seed", "4"],
                                                                                "cartpole_dqn_seed4")])
def test_a_seed_override_is_the_run_seed_unless_seed_is_given(argv, run_dir, tmp_path, monkeypatch):
    """``seed=N`` sets the run's seed as any other key (it was silently replaced by --seed's default, 0); an
    explicit ``--seed`` wins over it."""
    monkeypatch.chdir(tmp_path)
    config = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
    assert main(["train", "-c", config, "--max-env-step", "64", "--no-progress", "env.stop_value=none", *argv]) == 0
    with open(tmp_path / run_dir / "config.json") as f:
        assert json.load(f)["seed"] == int(run_dir[-1])
