"""Preemption, as clusters do it: SIGTERM (Slurm, Kubernetes) or SIGUSR1 (Slurm's ``--signal``) to a
training process ends the iteration, writes ``latest`` and exits with 128 + the signal's number; under
DDP every rank stops in the same iteration; a launcher forwards the signal and its ranks never outlive it;
a process that cannot stop is ended by its deadline (``preempt.grace_s``)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from engine.context import StopReason
from engine.preemption import Preempted
from middleware.checkpoint import load_checkpoint
from test_interrupt import CONFIGS, ENDLESS, _wait_for_rows  # the Ctrl-C tests' helpers

pytestmark = pytest.mark.timeout(300)


def _signal_at(iteration: int, signum: int = signal.SIGTERM, rank: int = 0):
    """A stage that sends this process ``signum`` in ``iteration`` (on ``rank`` only)."""
    def send(ctx):
        from engine.distributed import get_rank

        if ctx.total_step == iteration and get_rank() == rank:
            os.kill(os.getpid(), signum)
    return send


def _small_dqn(run_dir):
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

    main = json.loads(json.dumps(main_config))
    main["env"]["stop_value"] = 1e9  # never reached
    main["log"] = dict(progress=False, tensorboard=False)
    main["ckpt"] = dict(latest_every_s=0)
    return main, dict(create_config)


def test_sigterm_ends_the_iteration_writes_latest_and_raises_run_preempted(tmp_path):
    from pipelines import RunPreempted, build_pipeline

    before = signal.getsignal(signal.SIGTERM)
    pipeline = build_pipeline(_small_dqn(tmp_path), max_env_step=10**8, exp_name=str(tmp_path / "run"))
    assert signal.getsignal(signal.SIGTERM) is before  # a pipeline that is only built changes nothing
    pipeline.append(_signal_at(5), name="signal")
    with pytest.raises(RunPreempted) as caught:
        pipeline.run()
    assert caught.value.signal == "SIGTERM" and caught.value.exit_code == 143
    summary = caught.value.summary
    assert summary["stop_reason"] == "preempted" and pipeline.ctx.stop_reason == StopReason.PREEMPTED
    assert pipeline.ctx.total_step == 7  # the signal came in iteration 5; iteration 6 saw it and was the last
    latest = load_checkpoint(str(tmp_path / "run" / "ckpt" / "latest.pth.tar"))
    assert latest["ctx"]["env_step"] == summary["env_step"] and latest["ctx"]["train_iter"] == summary["train_iter"]
    assert signal.getsignal(signal.SIGTERM) is before  # given back when the pipeline closed


def test_a_resumed_preempted_run_continues_where_it_stopped(tmp_path):
    from pipelines import RunPreempted, build_pipeline, serial_pipeline

    pipeline = build_pipeline(_small_dqn(tmp_path), max_env_step=10**8, exp_name=str(tmp_path / "run"))
    pipeline.append(_signal_at(3, signal.SIGUSR1), name="signal")
    with pytest.raises(RunPreempted) as caught:
        pipeline.run()
    assert caught.value.exit_code == 138
    stopped = caught.value.summary["env_step"]
    summary = serial_pipeline(_small_dqn(tmp_path), max_env_step=stopped + 256, exp_name=str(tmp_path / "run"),
                              resume=True)
    assert summary["stop_reason"] == "max_env_step" and stopped < summary["env_step"] <= stopped + 256 + 8


def test_sigterm_during_the_final_checkpoint_write_waits_for_it(tmp_path, monkeypatch):
    """The signal lands while ``latest`` is being written at the end of the run: the write completes (the
    guard only records it), so ``latest`` is whole and holds the run's last iteration; and the run still
    reports the signal, so a script or a sweep stops instead of starting its next run."""
    import middleware.checkpoint as checkpoint
    from pipelines import RunPreempted, build_pipeline

    pipeline = build_pipeline(_small_dqn(tmp_path), max_env_step=512, exp_name=str(tmp_path / "run"))
    write = checkpoint.save_checkpoint

    def signalled_write(path, state):
        if pipeline.ctx.finish and path.endswith("latest.pth.tar"):
            os.kill(os.getpid(), signal.SIGTERM)  # handled between two bytecodes of the write below
        return write(path, state)

    monkeypatch.setattr(checkpoint, "save_checkpoint", signalled_write)
    with pytest.raises(RunPreempted) as caught:
        pipeline.run()  # the run had finished its budget: the signal stops nothing more in it
    summary = caught.value.summary
    latest = load_checkpoint(str(tmp_path / "run" / "ckpt" / "latest.pth.tar"))
    assert latest["ctx"]["train_iter"] == summary["train_iter"] and summary["stop_reason"] == "max_env_step"
    assert not [name for name in os.listdir(tmp_path / "run" / "ckpt") if ".tmp" in name]


def test_a_process_that_cannot_stop_exits_at_its_deadline(tmp_path):
    """A stage stuck after the signal: the guard's deadline ends the process with the signal's code."""
    script = f"""
import json, os, signal, sys, time
sys.path[:0] = {[os.path.dirname(os.path.abspath(__file__)), os.getcwd()]!r}
from test_preemption import _small_dqn
from pipelines import build_pipeline
main, create = _small_dqn(None)
main["preempt"] = dict(grace_s=2)
pipeline = build_pipeline((main, create), max_env_step=10**8, exp_name={str(tmp_path / 'run')!r})
def stuck(ctx):
    if ctx.total_step == 3:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(600)
pipeline.append(stuck, name="stuck")
pipeline.run()
"""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert "still running 2 s after SIGTERM (preempt.grace_s); exiting now with code 143" in proc.stderr
    assert time.monotonic() - start < 100


def test_a_bad_signal_name_is_refused_before_the_run(tmp_path):
    from engine.config import ConfigError
    from pipelines import build_pipeline

    main, create = _small_dqn(tmp_path)
    main["preempt"] = dict(signals=["SIGTREM"])
    with pytest.raises(ConfigError, match="preempt.signals: 'SIGTREM' is not a signal"):
        build_pipeline((main, create), exp_name=str(tmp_path / "run"))


def _run_cli(cmd, run_dir, send, env=None):
    """Start ``cmd`` in its own session, wait until it trains, ``send(proc)``, return (rc, out, err)."""
    proc = subprocess.Popen(cmd, cwd=os.path.dirname(run_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=dict(env or os.environ, OMP_NUM_THREADS="1"))
    try:
        _wait_for_rows(os.path.join(run_dir, "progress.csv"), 2, proc)
        send(proc)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, out, err


def _left_behind(session: int, timeout: float = 30.0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        left = subprocess.run(["pgrep", "-s", str(session)], capture_output=True, text=True).stdout.split()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _check_preempted(run_dir, out, err, ranks, signal_name="SIGTERM"):
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in out.splitlines() if line.startswith("baton: ") and " preempted: " in line]
    assert len(lines) == ranks, out
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["stop_reason"] == "preempted"
    assert len({line.split("env_step=")[1].split()[0] for line in lines}) == 1  # every rank, the same iteration
    latest = load_checkpoint(os.path.join(run_dir, "ckpt", "latest.pth.tar"))
    assert latest["ctx"]["train_iter"] == summary["train_iter"]
    assert f"preempted by {signal_name}; the latest checkpoint is in" in err


def test_the_command_exits_with_the_signals_code_and_its_checkpoint(tmp_path):
    """SIGTERM here; SIGUSR1's 138 is checked in process (test_a_resumed_preempted_run_continues_...)."""
    signum, code = signal.SIGTERM, 143
    run_dir = str(tmp_path / "run")
    cmd = ["baton", "train", "-c", os.path.join(CONFIGS, "cartpole_dqn_config.py"), "--exp-name", run_dir] + ENDLESS
    proc, out, err = _run_cli(cmd, run_dir, lambda p: os.kill(p.pid, signum))
    assert proc.returncode == code, err[-3000:]
    _check_preempted(run_dir, out, err, 1, signal.Signals(signum).name)


def test_sigterm_to_every_process_with_env_workers_still_saves(tmp_path):
    """What Slurm does (every process of the job signalled): the async env workers outlast the signal, so the
    run's last iteration still steps them and ``latest`` is written."""
    run_dir = str(tmp_path / "run")
    cmd = ["baton", "train", "-c", os.path.join(CONFIGS, "cartpole_dqn_config.py"), "--exp-name", run_dir,
           "env.manager.type=async"] + ENDLESS
    proc, out, err = _run_cli(cmd, run_dir, lambda p: os.killpg(p.pid, signal.SIGTERM))
    assert proc.returncode == 143, err[-3000:]
    _check_preempted(run_dir, out, err, 1)
    assert not _left_behind(proc.pid)


_SLOW_BUILD_CONFIG = """
import os, time
import gymnasium as gym

def slow_cartpole(**kwargs):  # the env is made while the run is built: say so, then take long
    open({marker!r}, "w").close()
    time.sleep(120)
    return gym.make("CartPole-v1", **kwargs)

if "BatonSlowStart-v0" not in gym.registry:
    gym.register("BatonSlowStart-v0", entry_point=slow_cartpole)
main_config = dict(exp_name="slow", env=dict(env_id="BatonSlowStart-v0"), log=dict(progress=False))
create_config = dict(env=dict(type="cartpole"), policy=dict(type="dqn"))
"""


@pytest.mark.timeout(120)
def test_a_signal_while_the_run_is_built_ends_it_with_one_line_and_its_code(tmp_path):
    """Issue 34: SIGTERM before the run's first iteration (its envs being made) ended ``baton train`` with no
    output at all (the signal's default action). Now: one line, exit 143, no run directory left."""
    marker, config = tmp_path / "building", tmp_path / "slow_config.py"
    config.write_text(_SLOW_BUILD_CONFIG.format(marker=str(marker)))
    proc = subprocess.Popen(["baton", "train", "-c", str(config), "--exp-name", str(tmp_path / "run"),
                             "--max-env-step", "1000"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 90
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, err[-3000:]
    assert err.splitlines() == ["baton: stopped by SIGTERM before the run's first iteration, while it was being "
                                "built: nothing was trained or written; the same command starts it again"], err
    assert out == "" and not (tmp_path / "run").exists()  # a build that fails leaves no run directory


@pytest.mark.timeout(120)
def test_later_signals_during_the_shutdown_leave_the_first_ones_code(tmp_path):
    """Issue 34: a second or third SIGTERM while the run shut down (envs closed, lines printed, the interpreter
    ending) killed it with status -15, cutting what followed. Now they change nothing: 143 and both lines."""
    run_dir = str(tmp_path / "run")
    cmd = ["baton", "train", "-c", os.path.join(CONFIGS, "cartpole_dqn_config.py"), "--exp-name", run_dir] + ENDLESS

    def signal_until_it_ends(proc):
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None:  # every 20 ms, through the run's last iteration, its close and its exit
            time.sleep(0.02)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    proc, out, err = _run_cli(cmd, run_dir, signal_until_it_ends)
    assert proc.returncode == 143, err[-3000:]
    _check_preempted(run_dir, out, err, 1)


@pytest.mark.distributed
def test_sigterm_to_the_launcher_alone_stops_every_rank_with_its_checkpoint(tmp_path):
    """What ``Popen.terminate()``, a sweep driver or a wrapper script sends: the launcher passes it on."""
    run_dir = str(tmp_path / "run")
    cmd = [sys.executable, os.path.join(CONFIGS, "cartpole_dqn_ddp_config.py"), "--nproc", "2", "--exp-name",
           run_dir] + ENDLESS
    proc, out, err = _run_cli(cmd, run_dir, lambda p: os.kill(p.pid, signal.SIGTERM),
                              dict(os.environ, BATON_DDP_TIMEOUT="60"))
    assert proc.returncode == 143, err[-3000:]
    _check_preempted(run_dir, out, err, 2)
    assert not _left_behind(proc.pid)


@pytest.mark.distributed
def test_the_ranks_never_outlive_a_killed_launcher(tmp_path):
    """SIGKILL to the launcher: its ranks notice, stop as if preempted (``latest`` written) and exit; the
    fork server and resource tracker follow."""
    run_dir = str(tmp_path / "run")
    cmd = [sys.executable, os.path.join(CONFIGS, "cartpole_dqn_ddp_config.py"), "--nproc", "2", "--exp-name",
           run_dir] + ENDLESS
    proc, out, err = _run_cli(cmd, run_dir, lambda p: os.kill(p.pid, signal.SIGKILL),
                              dict(os.environ, BATON_DDP_TIMEOUT="60"))
    assert proc.returncode == -signal.SIGKILL
    assert not _left_behind(proc.pid), "ranks outlived their launcher"
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["stop_reason"] == "preempted"
    assert load_checkpoint(os.path.join(run_dir, "ckpt", "latest.pth.tar"))["ctx"]["train_iter"] == \
        summary["train_iter"]


def preempted_rank_one(out_dir):
    """Under engine.launch: only rank 1 receives SIGTERM, in iteration 4; both must stop together."""
    from pipelines import RunPreempted, build_pipeline

    pipeline = build_pipeline(_small_dqn(out_dir), max_env_step=10**8, exp_name=os.path.join(out_dir, "run"))
    pipeline.append(_signal_at(4, rank=1), name="signal")
    try:
        pipeline.run()
    except RunPreempted:
        with open(os.path.join(out_dir, f"rank{pipeline.rank}.json"), "w") as f:
            json.dump({"total_step": pipeline.ctx.total_step, "stop_reason": str(pipeline.ctx.stop_reason)}, f)
        raise


@pytest.mark.distributed
def test_one_signalled_rank_stops_all_ranks_in_the_same_iteration(tmp_path):
    from engine import launch

    with pytest.raises(Preempted) as caught:
        launch(preempted_rank_one, nprocs=2, args=(str(tmp_path),), timeout=60)
    assert caught.value.exit_code == 143
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert ranks[0] == ranks[1] == {"total_step": 6, "stop_reason": "preempted"}


# ---- restarts and requeues continue their run ------------------------------------------------------------
def test_resume_auto_starts_a_run_then_continues_it(tmp_path):
    from pipelines import serial_pipeline

    run = str(tmp_path / "run")
    first = serial_pipeline(_small_dqn(tmp_path), max_env_step=256, exp_name=run, resume="auto")
    second = serial_pipeline(_small_dqn(tmp_path), max_env_step=512, exp_name=run, resume="auto")
    assert first["env_step"] == 256 and 256 < second["env_step"] <= 512 + 8
    assert second["run_dir"] == run and sorted(os.listdir(tmp_path)) == ["run"]


def test_resume_auto_refuses_a_run_of_another_algorithm(tmp_path):
    from dizoo.classic_control.cartpole.config.cartpole_ppo_config import create_config, main_config
    from pipelines import serial_pipeline
    from pipelines.run_dir import RunDirError

    run = str(tmp_path / "run")
    serial_pipeline(_small_dqn(tmp_path), max_env_step=128, exp_name=run)
    with pytest.raises(RunDirError, match="holds a run of policy 'dqn' on env 'CartPole-v1'; this config is policy "
                                          "'ppo'"):
        serial_pipeline((main_config, create_config), max_env_step=128, exp_name=run, resume="auto")


@pytest.mark.distributed
def test_a_rank_killed_under_torchrun_restarts_into_its_own_run_and_meets_its_budget(tmp_path):
    """``torchrun --max-restarts=1`` with the c10d rendezvous: rank 1 is SIGKILLed mid-run; the restarted
    worker group continues the same run directory from its newest checkpoint and stops at the budget."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir, budget = str(tmp_path / "run"), 12000
    # a quarter of the config's updates a collect: the restart is tested here, not the learning
    cmd = ["torchrun", "--nproc-per-node=2", "--max-restarts=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{port}", os.path.join(CONFIGS, "cartpole_dqn_ddp_config.py"),
           "--exp-name", run_dir, "--no-progress", "env.stop_value=none", "--max-env-step", str(budget),
           "ckpt.latest_every_s=1", "policy.learn.update_per_collect=4"]
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1", BATON_DDP_TIMEOUT="30"))
    try:
        _wait_for_rows(os.path.join(run_dir, "progress.csv"), 2, proc)
        deadline = time.monotonic() + 30
        while not os.path.isfile(os.path.join(run_dir, "ckpt", "latest.pth.tar")) and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        rank1 = [pid for pid in workers if "LOCAL_RANK=1\0" in open(f"/proc/{pid}/environ").read()]
        assert rank1, workers
        os.kill(int(rank1[0]), signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-4000:]
    assert "torchrun restart 1 of this worker group: continuing the run in" in err, err[-4000:]
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["stop_reason"] == "max_env_step" and budget <= summary["env_step"] < budget + 1000
    assert sorted(os.listdir(tmp_path)) == ["run"]  # no run started over beside it


def test_resume_auto_starts_over_a_directory_whose_start_never_ran(tmp_path):
    """A job killed while it started (before the guard: the signal's default action) left ``config.json``
    and the lock file; its requeue with ``--resume auto`` starts the run instead of failing to resume it."""
    from pipelines.run_dir import claim_run_dir

    run = tmp_path / "run"
    (run / "log").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / ".lock").write_text("{}")
    claim = claim_run_dir(str(run), 0, explicit=True, resume="auto")
    try:
        assert not claim.resumed and not (run / "config.json").exists()
    finally:
        claim.lock.release()
    (run / "ckpt").mkdir(exist_ok=True)
    (run / "ckpt" / "latest.pth.tar").write_bytes(b"x")
    claim = claim_run_dir(str(run), 0, explicit=True, resume="auto")
    claim.lock.release()
    assert claim.resumed


def test_a_torchrun_restart_continues_its_named_run_and_refuses_to_guess(tmp_path, monkeypatch):
    import contextlib

    from pipelines.run_dir import RunDirError
    from pipelines.assembly import _run_dir

    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    cfg = {"exp_name": str(tmp_path / "cfg_name"), "seed": 0}
    with contextlib.ExitStack() as resources:
        with pytest.raises(RunDirError, match="restarted this worker group .* give the run a directory with"):
            _run_dir(cfg, False, False, False, True, 1, resources)
        run = tmp_path / "run"
        (run / "ckpt").mkdir(parents=True)
        (run / "ckpt" / "latest.pth.tar").write_bytes(b"x")
        # --force on the command line would start the run over at every restart: a restart continues it
        assert _run_dir(dict(cfg, exp_name=str(run)), True, False, True, True, 1, resources) == (str(run), True)


def test_the_launcher_passes_on_a_signal_that_came_while_it_started_the_ranks(monkeypatch):
    from engine import launcher

    sent = []
    monkeypatch.setattr(launcher.os, "kill", lambda pid, signum: sent.append((pid, signum)))

    class Rank:
        pid = 4242

        def is_alive(self):
            return True

    forwarder = launcher._SignalForwarder(["SIGTERM"], grace_s=0)
    forwarder._received(signal.SIGTERM, None)  # no ranks yet
    assert sent == []
    forwarder.started([Rank()])
    assert sent == [(4242, signal.SIGTERM)] and forwarder.signum == signal.SIGTERM


def test_resume_before_an_override_keeps_the_overrides_in_order():
    from commands.options import parse_train_args

    args = parse_train_args(["--resume", "seed=1", "seed=2"])
    assert args.resume is True and args.overrides == ["seed=1", "seed=2"]
    assert parse_train_args(["--resume", "auto", "seed=1"]).resume == "auto"
