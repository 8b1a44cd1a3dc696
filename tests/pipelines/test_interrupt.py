"""Ctrl-C on a training run, as a terminal sends it (SIGINT to the whole process group): the run ends at
once with exit code 130, one line per process saying where it stopped, no traceback, the latest checkpoint
written as it finished (the one ``--resume`` continues), and no process left behind; the same through
baton's launcher (``--nproc 2``), whose ranks take the signal once and write their checkpoints."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from middleware.checkpoint import load_checkpoint, shard_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config")
ENDLESS = ["--no-progress", "env.stop_value=none", "--max-env-step", "100000000"]


def _wait_for_rows(csv_path: str, rows: int, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    """Until the run has logged ``rows`` rows: it is training, past its first evaluation and checkpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the run ended by itself (rc {proc.returncode}): {proc.stderr.read()[-2000:]}")
        if os.path.isfile(csv_path) and len(open(csv_path).read().splitlines()) > rows:
            return
        time.sleep(0.2)
    pytest.fail(f"no {rows} rows in {csv_path} within {timeout} s")


def _as_a_terminal_starts_it() -> None:
    """The command's SIGINT as a terminal's foreground job has it: delivered, handled by default."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(cmd, run_dir, env=None):
    proc = subprocess.Popen(cmd, cwd=os.path.dirname(run_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=env, preexec_fn=_as_a_terminal_starts_it)
    try:
        _wait_for_rows(os.path.join(run_dir, "progress.csv"), 2, proc)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10  # helpers (fork server, resource tracker) leave when the launcher has
    while time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.2)
    assert not left, f"processes left behind: {left}"
    return proc.returncode, out, err


def _check_stopped_with_checkpoint(run_dir, out, err, ranks):
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in out.splitlines() if line.startswith("baton: ") and " interrupted: " in line]
    assert len(lines) == ranks, out
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["stop_reason"] == "interrupted"
    assert f"train_iter={summary['train_iter']} " in lines[-1] or ranks > 1
    latest = load_checkpoint(os.path.join(run_dir, "ckpt", "latest.pth.tar"))
    assert latest["ctx"]["train_iter"] == summary["train_iter"]  # written as the run finished, not before
    assert "the same command with --resume continues the run" in err


def test_ctrl_c_ends_a_run_with_its_checkpoint_and_no_traceback(tmp_path):
    run_dir = str(tmp_path / "run")
    rc, out, err = _interrupt(["baton", "train", "-c", os.path.join(CONFIGS, "cartpole_dqn_config.py"),
                               "--exp-name", run_dir] + ENDLESS, run_dir)
    assert rc == 130, err[-3000:]
    _check_stopped_with_checkpoint(run_dir, out, err, ranks=1)


@pytest.mark.distributed
def test_ctrl_c_ends_every_rank_of_a_launched_job_with_its_checkpoint(tmp_path):
    run_dir = str(tmp_path / "run")
    env = dict(os.environ, BATON_DDP_TIMEOUT="60")
    rc, out, err = _interrupt([sys.executable, os.path.join(CONFIGS, "cartpole_dqn_ddp_config.py"), "--nproc", "2",
                               "--exp-name", run_dir] + ENDLESS, run_dir, env)
    assert rc == 130, err[-3000:]
    _check_stopped_with_checkpoint(run_dir, out, err, ranks=2)
    assert "[rank 0/2] interrupted" in out and "[rank 1/2] interrupted" in out
    assert os.path.isfile(shard_path(os.path.join(run_dir, "ckpt", "latest.pth.tar"), 1))
