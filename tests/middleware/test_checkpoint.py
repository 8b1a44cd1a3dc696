from __future__ import annotations

import collections
import errno
import os
import re
import shutil

import pytest
import torch

from engine import OnlineRLContext, Task
from engine.fileio import DiskFullError, atomic_write
from middleware import CheckpointError, CkptSaver, load_checkpoint


class Model:
    def __init__(self):
        self.w = torch.zeros(2)

    def state_dict(self):
        return {"w": self.w.clone()}


def test_atomic_write_keeps_old_file_when_writer_fails(tmp_path):
    path = str(tmp_path / "f.bin")
    atomic_write(path, lambda f: f.write(b"good"))

    def broken(f):
        f.write(b"half")
        raise KeyboardInterrupt  # a kill mid-write

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, broken)
    assert open(path, "rb").read() == b"good"
    assert os.listdir(tmp_path) == ["f.bin"]  # no temporary left behind


def _fails_with(error, over=None):
    """A writer that writes part of the file, then raises ``error`` over ``over`` (as torch's zip writer raises
    its own error over the OSError of the write that failed)."""
    def write(f):
        f.write(b"half")
        if over is None:
            raise error
        try:
            raise over
        except type(over):
            raise error
    return write


FULL_DISK_WRITERS = {
    "ENOSPC": _fails_with(OSError(errno.ENOSPC, "No space left on device")),
    "quota": _fails_with(OSError(errno.EDQUOT, "Disk quota exceeded")),
    "torch over ENOSPC": _fails_with(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 "
                                                  "vs 598"), over=OSError(errno.ENOSPC, "No space left on device")),
    # torch.save to a path: the C++ stream's error has no errno; the free space decides
    "torch, no errno": _fails_with(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs "
                                                "534"), over=RuntimeError("basic_ios::clear: iostream error")),
}


@pytest.mark.parametrize("writer", FULL_DISK_WRITERS.values(), ids=FULL_DISK_WRITERS.keys())
def test_atomic_write_names_a_full_disk_and_keeps_the_old_file(writer, tmp_path, monkeypatch):
    path = str(tmp_path / "f.bin")
    atomic_write(path, lambda f: f.write(b"good"))
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, (1 << 30) - 4096, 4096))
    with pytest.raises(DiskFullError) as err:
        atomic_write(path, writer)
    assert err.value.errno in (errno.ENOSPC, errno.EDQUOT) and err.value.path == path
    assert str(err.value).startswith(f"cannot write {path}: ")
    assert re.search(r"(no space left on device|disk quota exceeded) \(4\.0 KiB free there\); the previous version is "
                     r"unchanged\. Free space on that disk, or point the run at another one \(--exp-name DIR",
                     str(err.value)), str(err.value)
    assert open(path, "rb").read() == b"good"
    assert os.listdir(tmp_path) == ["f.bin"]  # no temporary left behind


def test_atomic_write_passes_other_errors_on(tmp_path, monkeypatch):
    """A writer's RuntimeError with space to spare, or another OSError, is not taken for a full disk."""
    path = str(tmp_path / "f.bin")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, 1 << 29, 1 << 29))
    with pytest.raises(RuntimeError, match="unexpected pos"):
        atomic_write(path, FULL_DISK_WRITERS["torch, no errno"])
    with pytest.raises(PermissionError):
        atomic_write(path, _fails_with(PermissionError(errno.EACCES, "Permission denied")))
    assert os.listdir(tmp_path) == []


def test_ckpt_saver_best_periodic_and_final(tmp_path):
    model = Model()
    saver = CkptSaver(model, str(tmp_path), train_freq=2)
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        def fake_train(ctx):
            ctx.train_iter += 1
            model.w += 1
            if ctx.train_iter in (1, 3):
                ctx.eval_value, ctx.last_eval_iter = float(ctx.train_iter), ctx.train_iter
                ctx.eval_output = {"mean": ctx.eval_value}
        task.use(fake_train)
        task.use(saver)
        task.run(max_step=4)
    files = sorted(os.listdir(tmp_path))
    assert files == ["best.pth.tar", "iteration_2.pth.tar", "iteration_4.pth.tar", "latest.pth.tar"]
    assert load_checkpoint(str(tmp_path / "best.pth.tar"))["ctx"]["train_iter"] == 3
    latest = load_checkpoint(str(tmp_path / "latest.pth.tar"))
    assert latest["ctx"]["train_iter"] == 4 and latest["policy"]["w"].tolist() == [4.0, 4.0]


def test_a_best_written_as_its_evaluation_is_published_holds_the_env_step_it_is_labelled_with(tmp_path):
    """Under DDP the final evaluation runs after the iteration's collection: rank 0's ctx.env_step (40) is its
    own share so far, the evaluation is labelled with the count the ranks agree on (48), which best holds."""
    saver = CkptSaver(Model(), str(tmp_path))
    ctx = OnlineRLContext(env_step=40, train_iter=3)
    ctx.eval_value, ctx.last_eval_iter = 5.0, 3
    ctx.eval_output = {"mean": 5.0, "train_iter": 3, "env_step": 48}
    saver.on_evaluation(ctx)
    best = load_checkpoint(str(tmp_path / "best.pth.tar"))["ctx"]
    assert (best["env_step"], best["train_iter"], ctx.env_step) == (48, 3, 40)


def test_ckpt_saver_error_keeps_last_good_checkpoint(tmp_path):
    model = Model()
    saver = CkptSaver(model, str(tmp_path), train_freq=1)
    task = Task()
    with task.start(ctx=OnlineRLContext()):
        def train(ctx):
            ctx.train_iter += 1
            model.w += 1
            if ctx.train_iter == 3:
                raise FloatingPointError("loss is nan")
        task.use(train)
        task.use(saver)
        with pytest.raises(FloatingPointError):
            task.run()
    latest = load_checkpoint(str(tmp_path / "latest.pth.tar"))
    assert latest["ctx"]["train_iter"] == 2  # the failed iteration wrote nothing


def test_load_checkpoint_missing_and_corrupt_name_the_path(tmp_path):
    missing = str(tmp_path / "nope.pth.tar")
    with pytest.raises(CheckpointError, match="nope.pth.tar"):
        load_checkpoint(missing)
    corrupt = tmp_path / "bad.pth.tar"
    corrupt.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="bad.pth.tar"):
        load_checkpoint(str(corrupt))
    foreign = tmp_path / "foreign.pth.tar"
    torch.save({"state_dict": {}}, foreign)
    with pytest.raises(CheckpointError, match="foreign.pth.tar"):
        load_checkpoint(str(foreign))


def test_check_policy_type_refuses_a_checkpoint_of_another_policy():
    from middleware.checkpoint import CheckpointError, check_policy_type

    check_policy_type({"meta": {"policy_type": "dqn"}}, "a.pth.tar", "dqn", "the config", "fix")
    check_policy_type({}, "old.pth.tar", "dqn", "the config", "fix")  # written before the record existed
    with pytest.raises(CheckpointError, match=r"^a.pth.tar was written by policy 'ppo', the config 'x' builds "
                                              r"'dqn': record with it$"):
        check_policy_type({"meta": {"policy_type": "ppo"}}, "a.pth.tar", "dqn", "the config 'x'", "record with it")
