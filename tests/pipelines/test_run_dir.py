"""Run directories: one per run, never another run's; --resume continues, --force starts over."""
from __future__ import annotations

import os

import pytest

from pipelines.cli import main
from pipelines.run_dir import RunDirError, default_run_name, resolve_run_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE_DQN = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")


def _run(path):
    os.makedirs(path)
    open(os.path.join(path, "config.json"), "w").close()


def test_default_name_carries_the_seed_and_a_counter_when_taken(tmp_path):
    base = str(tmp_path / "cartpole_dqn")
    assert default_run_name(base, 3) == base + "_seed3"
    assert default_run_name(base + "_seed0", 3) == base + "_seed3"  # configs written as x_seed0
    assert resolve_run_dir(base, 0, explicit=False) == base + "_seed0"
    _run(base + "_seed0")
    assert resolve_run_dir(base, 0, explicit=False) == base + "_seed0_2"
    assert resolve_run_dir(base, 1, explicit=False) == base + "_seed1"
    _run(base + "_seed0_2")
    assert resolve_run_dir(base, 0, explicit=False) == base + "_seed0_3"
    os.makedirs(base + "_seed0_3")  # an empty directory is free
    assert resolve_run_dir(base, 0, explicit=False) == base + "_seed0_3"


def test_resume_continues_the_newest_run_of_the_seed(tmp_path):
    base = str(tmp_path / "exp")
    for name in ("exp_seed0", "exp_seed0_2", "exp_seed0_10", "exp_seed1"):
        _run(str(tmp_path / name))
    assert resolve_run_dir(base, 0, explicit=False, resume=True) == base + "_seed0_10"
    assert resolve_run_dir(base, 1, explicit=False, resume=True) == base + "_seed1"
    with pytest.raises(RunDirError, match=r"no run to continue at .*exp_seed2 \(nor .*exp_seed2_<n>\)"):
        resolve_run_dir(base, 2, explicit=False, resume=True)


def test_an_explicit_directory_holding_a_run_is_refused_unless_resumed_or_forced(tmp_path):
    path = str(tmp_path / "mine")
    assert resolve_run_dir(path, 0, explicit=True) == path  # as given: no seed suffix
    _run(path)
    with pytest.raises(RunDirError, match=r"mine already holds a run \(config.json\): --resume to continue it, "
                                          r"--force to start over"):
        resolve_run_dir(path, 0, explicit=True)
    assert resolve_run_dir(path, 0, explicit=True, resume=True) == path
    with pytest.raises(RunDirError, match="give one of them"):
        resolve_run_dir(path, 0, explicit=True, resume=True, force=True)


def test_force_moves_the_old_run_aside_and_deletes_nothing(tmp_path):
    path = str(tmp_path / "mine")
    _run(path)
    assert resolve_run_dir(path, 0, explicit=True, force=True) == path
    assert not os.path.exists(path)
    aside = [name for name in os.listdir(tmp_path) if name.startswith("mine.old-")]
    assert len(aside) == 1 and os.listdir(tmp_path / aside[0]) == ["config.json"]
    _run(path)
    resolve_run_dir(path, 0, explicit=True, force=True)  # a second move in the same second gets its own name
    assert len([name for name in os.listdir(tmp_path) if name.startswith("mine.old-")]) == 2


def test_resume_of_an_explicit_directory_without_a_run_names_the_path(tmp_path):
    with pytest.raises(RunDirError, match=f"no run to continue at {tmp_path}/nothing:"):
        resolve_run_dir(str(tmp_path / "nothing"), 0, explicit=True, resume=True)


def test_a_config_run_twice_keeps_both_runs(tmp_path, monkeypatch, capsys):
    """The report this came from: a second run replaced the first's files. Now every run has its own
    directory, and the final line says which; a directory named explicitly that holds a run is refused.
    (``python CONFIG.py`` and ``baton train`` take the same path: tests/pipelines/test_cli.py.)"""
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert main(["train", "-c", CARTPOLE_DQN, "--max-env-step", "128", "--no-progress"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "run_dir=" in line]
    assert sorted(os.listdir(tmp_path)) == ["cartpole_dqn_seed0", "cartpole_dqn_seed0_2"]
    assert [line.rsplit("run_dir=", 1)[1] for line in lines] == ["cartpole_dqn_seed0", "cartpole_dqn_seed0_2"]
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "-c", CARTPOLE_DQN, "--exp-name", "cartpole_dqn_seed0", "--max-env-step", "64",
              "--no-progress"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("baton: cartpole_dqn_seed0 already holds a run")
