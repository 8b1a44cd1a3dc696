"""Checkpoints that are safe to load and always resumable (issue 13's first items)."""
from __future__ import annotations

import copy
import glob
import logging
import os
import pickle

import pytest
import torch

from engine import OnlineRLContext
from middleware import CheckpointError, CkptSaver, load_checkpoint
from middleware.checkpoint import LATEST, NonFiniteWeightsError, load_newest_checkpoint


class Model:
    def __init__(self):
        self.w = torch.zeros(2)

    def state_dict(self):
        return {"model": {"w": self.w.clone()}}


class RunsCode:
    """Unpickling this object would create ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_checkpoint_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "latest.pth.tar"
    with open(path, "wb") as f:
        torch.save({"format": 1, "policy": {"x": RunsCode(str(marker))}}, f, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="refused, not executed"):
        load_checkpoint(str(path))
    assert not marker.exists()


def test_every_checkpoint_of_ours_loads_without_pickle_code(quick_cartpole_config):
    """Prioritized replay in the checkpoint too (its sum tree used to be numpy arrays)."""
    from pipelines import serial_pipeline

    main, create = quick_cartpole_config
    main.policy.priority = True
    main.ckpt = dict(save_replay_buffer=True)
    summary = serial_pipeline((main, create), max_env_step=256)
    ckpt_dir = os.path.join(summary["run_dir"], "ckpt")
    for name in os.listdir(ckpt_dir):
        state = load_checkpoint(os.path.join(ckpt_dir, name))  # weights_only=True inside
        assert "replay_buffer" in state and state["meta"]["policy_type"] == "dqn"


def test_non_finite_weights_are_never_saved(tmp_path):
    model = Model()
    saver = CkptSaver(model, str(tmp_path), train_freq=1)
    ctx = OnlineRLContext(train_iter=1)
    saver(ctx)
    good = os.path.join(tmp_path, "iteration_1.pth.tar")
    assert os.path.isfile(good)
    model.w[0] = float("nan")
    ctx.train_iter = 2
    with pytest.raises(NonFiniteWeightsError, match=r"after update 2 \(model.w\).*last good checkpoint is .*"
                                                    r"iteration_1.pth.tar"):
        saver(ctx)
    assert not os.path.exists(os.path.join(tmp_path, "iteration_2.pth.tar"))
    assert torch.equal(load_checkpoint(os.path.join(tmp_path, LATEST))["policy"]["model"]["w"], torch.zeros(2))


def test_latest_is_written_every_latest_every_s_seconds(tmp_path):
    now = [0.0]
    saver = CkptSaver(Model(), str(tmp_path), latest_every_s=60, clock=lambda: now[0])
    ctx = OnlineRLContext()
    saver(ctx)
    assert not os.path.exists(tmp_path / LATEST)
    now[0] = 61.0
    ctx.train_iter = 5
    saver(ctx)
    assert load_checkpoint(str(tmp_path / LATEST))["ctx"]["train_iter"] == 5
    now[0] = 90.0
    ctx.train_iter = 6
    saver(ctx)  # 29 s later: not yet
    assert load_checkpoint(str(tmp_path / LATEST))["ctx"]["train_iter"] == 5


def test_a_full_disk_names_the_file_and_keeps_the_last_checkpoint(tmp_path, full_disk):
    """torch.save failing as it does on a full disk ('unexpected pos', the ENOSPC only in the exception under
    it): a DiskFullError naming the file and what to do; the previous checkpoints and latest stay as they
    were, no temporary file is left."""
    from engine.fileio import DiskFullError

    saver = CkptSaver(Model(), str(tmp_path), train_freq=1)
    ctx = OnlineRLContext(train_iter=1)
    saver(ctx)
    before = sorted(os.listdir(tmp_path))
    full_disk()
    ctx.train_iter = 2
    with pytest.raises(DiskFullError, match=r"cannot write .*iteration_2.pth.tar: no space left on device \(0 "
                                            r"bytes free there\); nothing was written. Free space on that disk, "
                                            r"or point the run at another one"):
        saver(ctx)
    assert sorted(os.listdir(tmp_path)) == before == ["iteration_1.pth.tar", LATEST]
    assert load_checkpoint(str(tmp_path / LATEST))["ctx"]["train_iter"] == 1


def test_a_full_disk_while_copying_to_latest_keeps_latest(tmp_path, monkeypatch):
    """The checkpoint is written, its copy to latest runs out of space: latest stays the previous one."""
    import errno
    import shutil

    from engine.fileio import DiskFullError

    saver = CkptSaver(Model(), str(tmp_path), train_freq=1)
    ctx = OnlineRLContext(train_iter=1)
    saver(ctx)

    def copy_on_a_full_disk(src, dst, *args):
        dst.write(src.read(10))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copyfileobj", copy_on_a_full_disk)
    ctx.train_iter = 2
    with pytest.raises(DiskFullError, match=r"cannot write .*latest.pth.tar: no space left on device"):
        saver(ctx)
    assert sorted(os.listdir(tmp_path)) == ["iteration_1.pth.tar", "iteration_2.pth.tar", LATEST]
    assert load_checkpoint(str(tmp_path / LATEST))["ctx"]["train_iter"] == 1


def test_stale_temporary_files_are_removed_at_start(tmp_path):
    stale = tmp_path / ".tmp-abc-latest.pth.tar"
    stale.write_bytes(b"half a checkpoint")
    (tmp_path / "best.pth.tar").write_bytes(b"kept")
    CkptSaver(Model(), str(tmp_path))
    assert not stale.exists() and (tmp_path / "best.pth.tar").exists()


def test_resume_falls_back_to_the_newest_loadable_checkpoint_and_says_which(tmp_path, caplog):
    saver = CkptSaver(Model(), str(tmp_path), train_freq=1)
    ctx = OnlineRLContext(train_iter=1)
    saver(ctx)
    (tmp_path / LATEST).write_bytes(b"cut short by a kill")
    with caplog.at_level(logging.WARNING):
        path, state = load_newest_checkpoint(str(tmp_path))
    assert path.endswith("iteration_1.pth.tar") and state["ctx"]["train_iter"] == 1
    assert "resuming from" in caplog.text and "latest.pth.tar is corrupt" in caplog.text


def test_resume_skips_a_checkpoint_with_nan_weights(tmp_path):
    torch.save({"format": 1, "policy": {"model": {"w": torch.tensor([float("nan")])}}, "ctx": {}},
               tmp_path / LATEST)
    with pytest.raises(CheckpointError, match="non-finite weights"):
        load_newest_checkpoint(str(tmp_path))


def test_a_checkpoint_of_another_algorithm_is_named_on_resume(quick_cartpole_config, tmp_path):
    from dizoo.classic_control.cartpole.config.cartpole_ppo_config import create_config, main_config
    from pipelines import serial_pipeline

    ppo = copy.deepcopy(main_config)
    ppo.exp_name, ppo.log = str(tmp_path / "run"), dict(progress=False)
    serial_pipeline((ppo, create_config), max_env_step=256)
    dqn_main, dqn_create = quick_cartpole_config
    dqn_main.exp_name = str(tmp_path / "run")
    # the run's config.json is refused first (pipelines.run_dir.check_same_task); without it, the checkpoint
    # itself names the algorithm
    for config in glob.glob(str(tmp_path / "run*" / "config.json")):
        os.remove(config)
    with pytest.raises(CheckpointError, match="written by policy 'ppo'.*this config trains 'dqn'"):
        serial_pipeline((dqn_main, dqn_create), resume=True)
