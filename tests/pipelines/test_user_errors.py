"""Every user error of ``baton train`` is one ``baton:`` line on stderr with exit status 2, with the name meant
where one is close, and no traceback (issue 23, item 5); ``--debug`` or ``BATON_DEBUG=1`` adds the traceback.
A start that fails leaves no run directory, so the next good run takes the unnumbered name (item 6). The
first case runs the command as a user would, in a process of its own; the others run ``commands.cli.main``
in this process (the same code path after the interpreter starts, without a torch import per case)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_DIR = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config")
CARTPOLE_DQN = os.path.join(CONFIG_DIR, "cartpole_dqn_config.py")
CARTPOLE_BC = os.path.join(CONFIG_DIR, "cartpole_bc_config.py")
QUICK = ["--max-env-step", "64", "--no-progress", "env.stop_value=none"]


def _baton(args, cwd, **env):
    return subprocess.run([sys.executable, "-m", "commands", "train", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=240, env=dict(os.environ, OMP_NUM_THREADS="1", **env))


def _one_line(proc):
    """The single ``baton:`` line of a run refused for its input: exit 2, no traceback."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("baton:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def _config_with(tmp_path, old, new):
    """The dizoo CartPole DQN config with ``old`` replaced by ``new``, as a file of the user's."""
    text = open(CARTPOLE_DQN).read()
    assert old in text
    path = tmp_path / "my_config.py"
    path.write_text(text.replace(old, new))
    return str(path)


#: (case, argv, the line's pattern): the cases of the report first (the first also as a process of its own),
#: then more of them
CASES = [
    ("key typo in the config file", lambda tmp: ["-c", _config_with(tmp, 'learning_rate=0.002', 'learning_rat=0.002')],
     r"unknown config key 'policy.learn.learning_rat'; did you mean 'policy.learn.learning_rate'\?"),
    ("bad value in the config file", lambda tmp: ["-c", _config_with(tmp, 'type="linear"', 'type="linaer"')],
     r"policy.other.eps.type='linaer' is not one of 'exp', 'linear' \(did you mean 'linear'\?\)"),
    ("top-level override of a nested key", lambda tmp: ["-c", CARTPOLE_DQN, "batch_size=64"],
     r"unknown config key 'batch_size'; did you mean 'policy.learn.batch_size'\?"),
    ("misspelt config path", lambda tmp: ["-c", os.path.join(CONFIG_DIR, "cartpole_dqn_cofig.py")],
     rf"config file not found: .*cartpole_dqn_cofig.py; did you mean '{re.escape(CARTPOLE_DQN)}'\?"),
    ("not a config file", lambda tmp: ["-c", os.path.join(ROOT, "README.md")],
     r"a config is a Python file defining main_config and create_config.*\.md files are not read"),
    ("config without main_config", lambda tmp: ["-c", _config_with(tmp, "main_config = ", "config = ")],
     r"does not define main_config"),
    ("missing dataset", lambda tmp: ["-c", CARTPOLE_BC, f"dataset.root={tmp}", "dataset.name=nope/missing-v0"],
     r"dataset 'nope/missing-v0' not found"),
]
CASES += [
    ("key at the wrong depth", lambda tmp: ["-c", _config_with(tmp, "nstep=3,", "nstep=3, batch_size=64,")],
     r"unknown config key 'policy.batch_size'; did you mean 'policy.learn.batch_size'\?"),
    ("config whose code fails", lambda tmp: ["-c", _config_with(tmp, "from easydict", "import no_such\nfrom easydict")],
     r"my_config.py, line \d+: ModuleNotFoundError: No module named 'no_such'"),
    ("policy setting refused as the policy is built", lambda tmp: ["-c", CARTPOLE_DQN, "policy.device.collect=gpu1"],
     r"policy.device.collect='gpu1' is not a device torch knows here"),
    ("unknown env id", lambda tmp: ["-c", CARTPOLE_DQN, "env.env_id=CartPol-v1"],
     r"env.env_id='CartPol-v1' is not a registered gymnasium env id. Did you mean 'CartPole-v1'"),
    ("misspelt algo", lambda tmp: ["--algo", "dqm", "--env", "CartPole-v1"], r"--algo 'dqm'.*did you mean 'dqn'\?"),
    ("misspelt policy type", lambda tmp: ["-c", _config_with(tmp, 'type="dqn"', 'type="dqm"')],
     r"unknown policy type 'dqm' \(did you mean 'dqn'\?\); registered policy types: .*dqn"),
    ("main_config not a dict", lambda tmp: ["-c", _config_with(tmp, "main_config = EasyDict(", "main_config = list(")],
     r"my_config.py: main_config must be a dict, got list"),
    ("run directory that cannot be made", lambda tmp: ["-c", CARTPOLE_DQN, "--exp-name", str(tmp / "file" / "run")],
     r"cannot write the run directory .*file/run: .*give --exp-name a directory you can write"),    ("algorithm module that cannot be imported",
     lambda tmp: ["-c", _config_with(tmp, 'type="dqn")', 'type="my_algo", import_names=["my_algo"])')],
     r"create_config policy.import_names: cannot import 'my_algo' \(ModuleNotFoundError: .*\); put the directory "
     r"holding it on PYTHONPATH"),
]


def _in_process(argv, work, monkeypatch, capsys):
    """``baton ARGV`` run by ``commands.cli.main`` in this process, in ``work``: (exit status, stderr)."""
    from commands.cli import main

    # --debug sets BATON_DEBUG in os.environ (for the processes a run starts): recorded here, so that it is
    # undone after the test and later tests in this worker see no traceback
    monkeypatch.setenv("BATON_DEBUG", os.environ.get("BATON_DEBUG", "0"))  # "0": off, as when unset
    monkeypatch.chdir(work)
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    return code, capsys.readouterr().err


def _one_line_in_process(argv, work, monkeypatch, capsys):
    code, err = _in_process(argv, work, monkeypatch, capsys)
    lines = [line for line in err.splitlines() if line.startswith("baton:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err[-3000:]
    return lines[0]


def test_a_user_error_is_one_line_with_exit_2_from_the_command_itself(tmp_path):
    """The report's first case, as a user meets it: a process of its own, its stderr and exit status."""
    args, message = CASES[0][1:]
    work = tmp_path / "work"
    work.mkdir()
    line = _one_line(_baton([*args(tmp_path), *QUICK], work))
    assert re.search(message, line), line
    assert os.listdir(work) == []  # no run directory, no config.json


@pytest.mark.parametrize("args,message", [c[1:] for c in CASES[1:]], ids=[c[0] for c in CASES[1:]])
def test_a_user_error_is_one_line_with_exit_2_and_leaves_no_run_directory(args, message, tmp_path, monkeypatch,
                                                                          capsys):
    monkeypatch.delenv("BATON_DEBUG", raising=False)
    (tmp_path / "file").write_text("")
    work = tmp_path / "work"
    work.mkdir()
    line = _one_line_in_process(["train", *args(tmp_path), *QUICK], work, monkeypatch, capsys)
    assert re.search(message, line), line
    assert os.listdir(work) == []


def test_after_a_failed_start_the_next_run_takes_the_unnumbered_name(tmp_path, monkeypatch, capsys):
    """The report: each failed start (policy.learn.td_loss=foo; a policy setting refused as the policy is
    built) left a run directory holding config.json, so the next good run became ``_6``."""
    monkeypatch.delenv("BATON_DEBUG", raising=False)
    for bad in ("policy.learn.td_loss=foo", "policy.device.collect=gpu1"):
        _one_line_in_process(["train", "-c", CARTPOLE_DQN, bad, *QUICK], tmp_path, monkeypatch, capsys)
    assert os.listdir(tmp_path) == []
    code, _ = _in_process(["train", "-c", CARTPOLE_DQN, *QUICK], tmp_path, monkeypatch, capsys)
    assert code in (0, None)
    assert os.listdir(tmp_path) == ["cartpole_dqn_seed0"]


@pytest.mark.parametrize("how,bad", [("--debug", "policy.learn.td_loss=foo"),  # refused before the build ...
                                     ("BATON_DEBUG=1", "policy.device.collect=gpu1")])  # ... and in it
def test_debug_shows_the_traceback_of_a_user_error_too(how, bad, tmp_path, monkeypatch, capsys):
    args = ["--debug"] if how == "--debug" else []
    if how == "--debug":
        monkeypatch.delenv("BATON_DEBUG", raising=False)
    else:
        monkeypatch.setenv("BATON_DEBUG", "1")
    code, err = _in_process(["train", "-c", CARTPOLE_DQN, bad, *args, *QUICK], tmp_path, monkeypatch, capsys)
    assert code == 2, err[-3000:]
    assert "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1].startswith("baton: "), err[-3000:]
    assert os.listdir(tmp_path) == []


def test_a_full_disk_ends_a_command_with_status_1_and_wrong_input_with_2(tmp_path, monkeypatch):
    """Exit status 2 says the input must change; 1 that the machine failed (issue 34): a full disk, named as such,
    also when a launched rank reports it."""
    import json as json_

    from commands import user_errors
    from engine.config import ConfigError
    from engine.fileio import DiskFullError

    full = DiskFullError("cannot write run/ckpt/latest.pth.tar: no space left on device", "run/ckpt/latest.pth.tar")
    assert user_errors.exit_status(full) == user_errors.ENVIRONMENT_EXIT == 1
    assert user_errors.exit_status(ConfigError("bad key")) == user_errors.USER_ERROR_EXIT == 2
    monkeypatch.setenv("BATON_ERROR_REPORTS", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(SystemExit) as stop:
        user_errors.exit_on_user_error(full)
    assert stop.value.code == 1 and json_.loads((tmp_path / "rank1.json").read_text())["status"] == 1
    assert user_errors._lines(str(tmp_path)) == (["baton: " + str(full)], 1)
