"""Run directories: one per run, never another run's; --resume continues, --force starts over."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from commands.cli import main
from pipelines.run_dir import RunDirError, default_run_name, resolve_run_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE_DQN = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")


def _run(path):
    """A directory holding a run that ran (config.json alone is what a start that never ran leaves)."""
    os.makedirs(path)
    for name in ("config.json", "summary.json"):
        open(os.path.join(path, name), "w").close()


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
    with pytest.raises(RunDirError, match=r"mine already holds a run \(config.json, summary.json\): --resume to "
                                          r"continue it, --force to start over"):
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
    assert len(aside) == 1 and sorted(os.listdir(tmp_path / aside[0])) == ["config.json", "summary.json"]
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


def test_a_new_run_that_never_ran_leaves_no_directory(tmp_path):
    """Released holding only what its start wrote (config.json, empty directories), a new run's directory
    goes; anything a run writes keeps all of it; a resumed run's directory is never touched."""
    from pipelines.run_dir import claim_run_dir

    base = str(tmp_path / "exp")
    claim = claim_run_dir(base, 0, explicit=False)
    open(os.path.join(claim.path, "config.json"), "w").close()
    os.makedirs(os.path.join(claim.path, "log", "empty"))
    claim.lock.release()
    assert os.listdir(tmp_path) == []
    claim = claim_run_dir(base, 0, explicit=False)  # the unnumbered name again
    assert claim.path == base + "_seed0"
    open(os.path.join(claim.path, "config.json"), "w").close()
    open(os.path.join(claim.path, "summary.json"), "w").close()
    claim.lock.release()
    assert sorted(os.listdir(claim.path)) == ["config.json", "summary.json"]
    resumed = claim_run_dir(base, 0, explicit=False, resume=True)
    os.remove(os.path.join(claim.path, "summary.json"))  # a run holding config.json alone: still a run
    resumed.lock.release()
    assert os.listdir(claim.path) == ["config.json"]


def test_an_empty_directory_named_explicitly_stays_but_loses_the_start_files(tmp_path):
    from pipelines.run_dir import claim_run_dir

    path = tmp_path / "mine"
    path.mkdir()
    claim = claim_run_dir(str(path), 0, explicit=True)
    (path / "config.json").write_text("{}")
    claim.lock.release()
    assert path.is_dir() and os.listdir(path) == []


def test_a_process_that_ends_holding_a_run_that_never_ran_removes_it(tmp_path):
    """A pipeline built and never run nor closed: the lock is released as the process exits (atexit)."""
    script = ("import importlib.util, os, sys\n"
              "spec = importlib.util.spec_from_file_location('run_dir', sys.argv[1])\n"
              "run_dir = importlib.util.module_from_spec(spec)\n"
              "spec.loader.exec_module(run_dir)\n"
              "claim = run_dir.claim_run_dir(sys.argv[2], 0, explicit=True)\n"
              "open(os.path.join(claim.path, 'config.json'), 'w').close()\n")
    subprocess.run([sys.executable, "-c", script, os.path.join(ROOT, "pipelines", "run_dir.py"),
                    str(tmp_path / "run")], check=True, timeout=60)
    assert os.listdir(tmp_path) == []


def test_a_run_directory_that_cannot_be_made_is_a_run_dir_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirError, match=r"cannot write the run directory .*file/run: .*give --exp-name a "
                                          r"directory you can write"):
        resolve_run_dir(str(tmp_path / "file" / "run"), 0, explicit=True)


def test_a_pipeline_closed_without_running_leaves_no_directory(quick_cartpole_config, tmp_path, monkeypatch):
    """build_pipeline claims the directory once the envs and the policy are built; close() without run()
    removes it, and so does a build that fails after the claim: the next run takes the unnumbered name."""
    from pipelines import build_pipeline, stages

    main_cfg, create_cfg = quick_cartpole_config
    main_cfg.exp_name = str(tmp_path / "exp")
    pipeline = build_pipeline((main_cfg, create_cfg), max_env_step=64)
    assert sorted(os.listdir(pipeline.cfg.exp_name)) == [".lock", "config.json"]
    pipeline.close()
    assert os.listdir(tmp_path) == []

    def broken(*args, **kwargs):
        raise RuntimeError("a stage that fails to build")

    with monkeypatch.context() as patch:
        patch.setattr(stages, "evaluator", broken)
        with pytest.raises(RuntimeError, match="a stage that fails to build"):
            build_pipeline((main_cfg, create_cfg), max_env_step=64)
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="policy.learn.td_loss='foo' is not one of"):  # refused before a build
        build_pipeline((dict(main_cfg, policy=dict(main_cfg.policy, learn=dict(td_loss="foo"))), create_cfg))
    assert os.listdir(tmp_path) == []
    summary = build_pipeline((main_cfg, create_cfg), max_env_step=64).run()
    assert summary["run_dir"] == str(tmp_path / "exp_seed0")
