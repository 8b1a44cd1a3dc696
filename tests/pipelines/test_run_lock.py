"""One writer per run: the process that writes a run holds ``<run>/.lock`` (``fcntl.flock``) for the run's
whole life; a second process given that run (``--resume``, ``--force``, the same ``--exp-name``) is refused
before it writes anything, with one ``baton:`` line naming the holder; the kernel drops the lock when the
holder dies, ``kill -9`` included, so a lock is never stale; a pipeline releases it when it closes."""
from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from middleware.checkpoint import CheckpointError
from pipelines import build_pipeline
from commands.cli import main
from pipelines.run_dir import LOCK_NAME, RunDirError, claim_run_dir

pytestmark = pytest.mark.timeout(240)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE_DQN = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
RUN_DIR_PY = os.path.join(ROOT, "pipelines", "run_dir.py")

# holds <run>/.lock as a process of host sys.argv[2] would (stdlib only: starts in a fraction of a second)
FOREIGN_HOLDER = """
import fcntl, json, os, sys, time
os.makedirs(sys.argv[1], exist_ok=True)
fd = os.open(os.path.join(sys.argv[1], ".lock"), os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, json.dumps({"pid": 4242, "host": sys.argv[2], "started": "2030-01-02T03:04:05+00:00"}).encode())
print("held", flush=True)
time.sleep(120)
"""

# claims the run with pipelines/run_dir.py (loaded alone: no torch), then forks a child that outlives it
FORKING_HOLDER = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("run_dir", sys.argv[1])
run_dir = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_dir)
claim = run_dir.claim_run_dir(sys.argv[2], 0, explicit=True)
if os.fork() == 0:
    os.write(1, f"child {os.getpid()}\\n".encode())  # one write each: the two processes share the pipe
    time.sleep(120)
    os._exit(0)
os.write(1, b"parent\\n")
time.sleep(120)
"""


def _start(cmd, ready, cwd=None):
    """Start ``cmd`` in its own session; wait (at most 120 s) until ``ready()`` is true."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not ready(proc):
        if proc.poll() is not None:
            pytest.fail(f"the holder ended (rc {proc.returncode}): {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            _kill(proc)
            pytest.fail("the holder did not take the run within 120 s")
        time.sleep(0.1)
    return proc


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _refused(capsys, args):
    """Run ``baton ARGS`` in this process; it must exit 2 with one ``baton:`` line, which is returned."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("baton: ")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_second_writer_is_refused_while_the_holder_lives_and_accepted_after_kill_9(tmp_path, monkeypatch,
                                                                                   capsys):
    run = str(tmp_path / "run")
    lock_file = os.path.join(run, LOCK_NAME)
    monkeypatch.chdir(tmp_path)
    holder = _start(["baton", "train", "-c", CARTPOLE_DQN, "--exp-name", run, "env.stop_value=none",
                     "--max-env-step", "10000000", "--no-progress"],
                    lambda proc: os.path.isfile(os.path.join(run, "ckpt", "latest.pth.tar")))
    try:
        assert json.load(open(lock_file))["pid"] == holder.pid
        host = socket.gethostname()
        for flag in ("--resume", "--force"):
            line = _refused(capsys, ["train", "-c", CARTPOLE_DQN, "--exp-name", run, flag, "--max-env-step", "1",
                                     "--no-progress"])
            assert line.startswith(f"baton: {run} is being written by another process: pid {holder.pid} on host "
                                   f"{host}, since "), line
            assert f"wait for it to end, or stop it (kill {holder.pid})" in line
        assert os.listdir(tmp_path) == ["run"]  # --force moved nothing aside
        assert holder.poll() is None  # and the holder goes on
    finally:
        _kill(holder)
    assert os.path.isfile(lock_file)  # kill -9 left the file, but not the lock
    assert main(["train", "-c", CARTPOLE_DQN, "--exp-name", run, "--resume", "--max-env-step", "1",
                 "--no-progress"]) == 0
    assert os.path.isfile(os.path.join(run, "summary.json")) and not os.path.exists(lock_file)


def test_two_pipelines_one_after_the_other_on_one_run(quick_cartpole_config):
    main_cfg, create_cfg = quick_cartpole_config
    run = main_cfg.exp_name
    lock_file = os.path.join(run, LOCK_NAME)
    first = build_pipeline((main_cfg, create_cfg), max_env_step=64, exp_name=run)
    assert json.load(open(lock_file))["pid"] == os.getpid()
    with pytest.raises(RunDirError, match=f"{run} is being written by this process .*: a pipeline built on it is "
                                          f"still open; run or close\\(\\) it first"):
        build_pipeline((main_cfg, create_cfg), max_env_step=128, exp_name=run, resume=True)
    first.run()
    assert not os.path.exists(lock_file)  # released as the run ended
    assert build_pipeline((main_cfg, create_cfg), max_env_step=128, exp_name=run, resume=True).run()["env_step"] > 64
    assert not os.path.exists(lock_file)
    for name in os.listdir(os.path.join(run, "ckpt")):
        os.remove(os.path.join(run, "ckpt", name))
    with pytest.raises(CheckpointError):  # a build that fails after the claim releases it too
        build_pipeline((main_cfg, create_cfg), max_env_step=128, exp_name=run, resume=True)
    assert not os.path.exists(lock_file)
    build_pipeline((main_cfg, create_cfg), max_env_step=128, exp_name=run, force=True).close()


def test_the_lock_file_names_its_holder_and_goes_with_the_release(tmp_path):
    run = str(tmp_path / "run")
    before = datetime.datetime.now().astimezone().replace(microsecond=0)
    claim = claim_run_dir(run, 0, explicit=True)
    holder = json.load(open(os.path.join(run, LOCK_NAME)))
    assert claim.path == run and holder == claim.lock.holder
    assert sorted(holder) == ["host", "pid", "started"]
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    started = datetime.datetime.fromisoformat(holder["started"])
    assert started.tzinfo is not None and before <= started <= datetime.datetime.now().astimezone()
    claim.lock.release()
    claim.lock.release()  # idempotent
    assert not os.path.exists(run)  # the claim made the directory and nothing was written: nothing is left


def test_a_lock_held_from_another_host_says_what_to_do(tmp_path):
    run = str(tmp_path / "run")
    holder = _start([sys.executable, "-c", FOREIGN_HOLDER, run, "far-away"],
                    lambda proc: proc.stdout.readline() == "held\n")
    try:
        open(os.path.join(run, "config.json"), "w").close()
        with pytest.raises(RunDirError) as err:
            claim_run_dir(run, 0, explicit=True, resume=True)
        message = str(err.value)
        assert message.startswith(f"{run} is being written by another process: pid 4242 on host far-away, since "
                                  f"2030-01-02T03:04:05+00:00; the lock is held from host far-away"), message
        assert "released when its filesystem lease or its process ends" in message
        assert f"delete {run}/.lock only if you are sure no process on far-away still writes this run" in message
    finally:
        _kill(holder)


def test_new_runs_of_one_config_started_at_once_take_two_directories(tmp_path):
    base = str(tmp_path / "exp")
    holder = _start([sys.executable, "-c", FOREIGN_HOLDER, base + "_seed0", socket.gethostname()],
                    lambda proc: proc.stdout.readline() == "held\n")
    try:  # the first run has locked exp_seed0 and not written yet: the second takes the next name
        claim = claim_run_dir(base, 0, explicit=False)
        assert claim.path == base + "_seed0_2"
        claim.lock.release()
    finally:
        _kill(holder)


def test_a_child_forked_by_the_holder_does_not_keep_the_lock(tmp_path):
    """Env workers and the background evaluator fork from the holder; killed, it must free the run even
    while they live on."""
    run = str(tmp_path / "run")
    holder = _start([sys.executable, "-c", FORKING_HOLDER, RUN_DIR_PY, run], lambda proc: True)
    lines = [holder.stdout.readline().split() for _ in range(2)]
    assert sorted(line[:1] for line in lines) == [["child"], ["parent"]], holder.stderr.read()[-2000:]
    child = int(next(line[1] for line in lines if line[0] == "child"))
    try:
        with pytest.raises(RunDirError, match=f"pid {holder.pid} on host"):
            claim_run_dir(run, 0, explicit=True, force=True)
        os.kill(holder.pid, signal.SIGKILL)  # the parent alone
        holder.wait(timeout=30)
        os.kill(child, 0)  # the child lives
        claim_run_dir(run, 0, explicit=True, force=True).lock.release()
    finally:
        _kill(holder)


@pytest.mark.distributed
def test_every_rank_of_a_launched_job_is_refused_alike(tmp_path):
    """Rank 0 alone takes the lock; when it is refused, every rank fails with its message, none waits (the
    job ends; the launcher prints the message once per rank or once per job)."""
    run = str(tmp_path / "run")
    holder = _start([sys.executable, "-c", FOREIGN_HOLDER, run, socket.gethostname()],
                    lambda proc: proc.stdout.readline() == "held\n")
    try:
        open(os.path.join(run, "config.json"), "w").close()
        proc = subprocess.run([sys.executable, CARTPOLE_DQN.replace("_dqn_config", "_dqn_ddp_config"), "--nproc",
                               "2", "--exp-name", run, "--resume", "--max-env-step", "64", "--no-progress"],
                              capture_output=True, text=True, timeout=180,
                              env=dict(os.environ, BATON_DDP_TIMEOUT="60"))
    finally:
        _kill(holder)
    refusals = [line for line in proc.stderr.splitlines()
                if line.startswith(f"baton: {run} is being written by another process: pid 4242 on host ")]
    assert proc.returncode != 0 and refusals, proc.stderr[-3000:]
    assert sorted(os.listdir(run)) == [LOCK_NAME, "config.json"]  # nothing written, not even the config
    assert os.path.getsize(os.path.join(run, "config.json")) == 0
