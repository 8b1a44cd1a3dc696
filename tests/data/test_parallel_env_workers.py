"""Several agents per env in worker processes (``data.parallel_env_workers``, ``env.manager.type='async'`` for
``mpe``): the batch a worker split makes is the one ``ParallelEnvBatch`` makes in this process, row for row and
seed for seed; an env that raises in a worker, and a worker that dies, are named."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from data.parallel_env_workers import EnvWorkerError, ParallelEnvWorkers
from data.parallel_envs import ParallelEnvBatch

simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")


def _spread():
    return simple_spread_v3.parallel_env(N=3, local_ratio=0.5, max_cycles=25, continuous_actions=False)


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_step_the_same_rows_as_one_process_through_episode_ends(workers):
    inline, split = ParallelEnvBatch([_spread] * 5), ParallelEnvWorkers([_spread] * 5, workers)
    try:
        assert split.workers == workers and split.num_envs == 5
        assert split.single_observation_space == inline.single_observation_space
        assert split.single_action_space == inline.single_action_space and split.agents == inline.agents
        _assert_same(split.reset(seed=7)[0], inline.reset(seed=7)[0])
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(30):  # past max_cycles: every row ends once and resets in the same step
            actions = rng.integers(0, 5, (5, 3))
            got, want = split.step(actions), inline.step(actions)
            _assert_same(got[0], want[0])
            for i in (1, 2, 3):
                np.testing.assert_array_equal(got[i], want[i])
            np.testing.assert_array_equal(got[4]["agent_terminated"], want[4]["agent_terminated"])
            assert ("final_obs" in got[4]) == ("final_obs" in want[4])
            if "final_obs" in want[4]:
                ends += 1
                np.testing.assert_array_equal(got[4]["_final_obs"], want[4]["_final_obs"])
                for g, w in zip(got[4]["final_obs"], want[4]["final_obs"]):
                    assert (g is None) == (w is None)
                    if w is not None:
                        _assert_same(g, w)
        assert ends == 1
    finally:
        split.close()
        inline.close()
    assert all(not p.is_alive() for p in split._processes)


class _Raising:
    """Makes Simple Spread whose third step raises: an env bug inside a worker."""

    def __call__(self):
        env = _spread()
        step, count = env.step, [0]

        def failing(actions):
            count[0] += 1
            if count[0] == 3:
                raise ValueError("the env's own error")
            return step(actions)

        env.step = failing
        return env


def test_an_env_that_raises_in_a_worker_is_named_with_its_traceback():
    envs = ParallelEnvWorkers([_spread, _spread, _Raising(), _spread], 2)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros((4, 3), np.int64))
        envs.step(np.zeros((4, 3), np.int64))
        with pytest.raises(EnvWorkerError, match=r"(?s)env worker 1 \(envs 2-3\) failed:.*ValueError: the env's own error"):
            envs.step(np.zeros((4, 3), np.int64))
    finally:
        envs.close()


def test_after_a_worker_raises_every_answer_is_read_and_the_next_command_gets_its_own():
    """Worker 0 raises; worker 1's answer to the same step is read before the error is raised, so the next reset
    is answered by the reset, not by the step left in a pipe."""
    inline = ParallelEnvBatch([_spread] * 4)
    envs = ParallelEnvWorkers([_Raising(), _spread, _spread, _spread], 2)
    try:
        envs.reset(seed=0)
        for _ in range(2):
            envs.step(np.zeros((4, 3), np.int64))
        with pytest.raises(EnvWorkerError, match=r"env worker 0 \(envs 0-1\) failed"):
            envs.step(np.zeros((4, 3), np.int64))
        _assert_same(envs.reset(seed=3)[0], inline.reset(seed=3)[0])
    finally:
        envs.close()
        inline.close()


def test_an_env_that_cannot_be_made_is_named_and_no_worker_is_left():
    def broken():
        raise RuntimeError("no such map")

    with pytest.raises(EnvWorkerError, match=r"(?s)env worker 1 \(envs 2-3\) failed:.*no such map"):
        ParallelEnvWorkers([_spread, _spread, broken, _spread], 2)
    import multiprocessing
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("baton-env-worker")]


def test_a_worker_that_dies_is_named_and_the_rest_close():
    envs = ParallelEnvWorkers([_spread] * 4, 2)
    envs.reset(seed=0)
    os.kill(envs._processes[1].pid, signal.SIGKILL)
    envs._processes[1].join(10)
    with pytest.raises(EnvWorkerError, match=r"env worker 1 \(envs 2-3\) died \(exit code -9\)"):
        envs.step(np.zeros((4, 3), np.int64))
    envs.close()
    assert all(not p.is_alive() for p in envs._processes)


def test_a_hung_worker_is_killed_at_close(monkeypatch):
    """A worker that never answers 'close' and ignores SIGTERM (as workers do, to outlast a preemption signal)
    is killed: close returns and leaves no process behind."""
    envs = ParallelEnvWorkers([_spread] * 2, 2)
    envs.reset(seed=0)
    os.kill(envs._processes[0].pid, signal.SIGSTOP)  # hung: answers nothing, not even SIGTERM
    monkeypatch.setattr(ParallelEnvWorkers, "CLOSE_WAIT_S", 0.5)
    envs.close()
    assert all(not p.is_alive() for p in envs._processes)


def test_workers_outlast_a_preemption_signal_until_closed():
    """A cluster signals every process of a job; the run still finishes its iteration with its envs."""
    envs = ParallelEnvWorkers([_spread] * 2, 2)
    try:
        envs.reset(seed=0)
        for process in envs._processes:
            os.kill(process.pid, signal.SIGTERM)
        envs.step(np.zeros((2, 3), np.int64))  # still answering
    finally:
        envs.close()
    assert all(not p.is_alive() for p in envs._processes)


_KILLED_OUTRIGHT = """
import os, signal, sys
from mpe2 import simple_spread_v3
from data.parallel_env_workers import ParallelEnvWorkers

def make():
    return simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)

envs = ParallelEnvWorkers([make] * 4, 2, context="fork")
print(" ".join(str(process.pid) for process in envs._processes), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="watches the workers through /proc")
def test_a_main_process_killed_outright_leaves_no_worker(tmp_path, outliving):
    """kill -9 runs no close(): each forked worker must see its main process gone by itself (it held a copy of the
    main process's end of its pipe, so it waited for a command for good)."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = tmp_path / "out.txt"  # a file, not a pipe: a worker that lives on would hold a pipe open
    with open(out, "w") as f:
        proc = subprocess.run([sys.executable, "-c", _KILLED_OUTRIGHT], cwd=root, stdout=f, stderr=f, timeout=120)
    assert proc.returncode == -signal.SIGKILL, out.read_text()
    [line] = [line for line in out.read_text().splitlines() if line.replace(" ", "").isdigit()]
    workers = [int(pid) for pid in line.split()]
    assert len(workers) == 2
    alive = outliving(workers)
    assert not alive, f"env worker(s) {alive} outlived their killed main process"
