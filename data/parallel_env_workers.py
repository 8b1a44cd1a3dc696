"""Several agents per env, stepped in worker processes: ``ParallelEnvBatch`` split over processes
(``env.manager.type='async'`` with a multi-agent env type, e.g. ``mpe``).

A PettingZoo env step is Python (mpe2's Simple Spread: about 0.4 ms for its three agents), so one process
steps a few thousand envs a second however many cores the machine has. ``ParallelEnvWorkers`` gives each of
``workers`` processes a contiguous slice of the envs, as one ``ParallelEnvBatch``: a step sends each its slice of
the actions, then gathers the slices in order, so the batch is the one ``ParallelEnvBatch`` would have made of
all the envs (same rows, same seeds: env ``i`` is seeded ``seed + i`` wherever it runs).

Workers outlast a preemption signal as the single-agent env manager's do (``data.envs``): a cluster signals
every process of a job, and the run must still finish its iteration and write its checkpoint. An error in a
worker comes back as the env's own, naming the worker and its envs; a worker that died says so.
"""
from __future__ import annotations

import multiprocessing
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cloudpickle
import gymnasium as gym
import numpy as np

from engine.preemption import DEFAULT_SIGNALS, PreemptionGuard

from .parallel_envs import ParallelEnvBatch, env_seeds

__all__ = ["ParallelEnvWorkers", "EnvWorkerError"]

#: the attributes of a ``ParallelEnvBatch`` the main process mirrors (the env loop and the policies read them)
SPACES = ("name", "agents", "num_agents", "agent_action_space", "agent_observation_space",
          "single_observation_space", "single_action_space")


class EnvWorkerError(RuntimeError):
    """A worker process failed: its env raised (the traceback is in the message) or the process died."""


def _serve(pipe: Any, payload: bytes, parent_end: Any = None) -> None:
    """A worker's loop: build its ``ParallelEnvBatch``, report its spaces, then answer commands until 'close'.

    ``parent_end``: the main process's end of this worker's pipe, closed here first: a forked worker holds a copy,
    and while it is open ``recv`` never sees EOF, so a main process killed outright (``kill -9``, the OOM killer)
    left its workers waiting for a command for good."""
    if parent_end is not None:
        parent_end.close()
    PreemptionGuard(DEFAULT_SIGNALS, 60.0, describe="env worker").install()
    try:
        envs = ParallelEnvBatch(cloudpickle.loads(payload))
        pipe.send(("ok", {name: getattr(envs, name) for name in SPACES}))
    except Exception:  # noqa: BLE001 - reported to the main process, which raises it there
        pipe.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            command, data = pipe.recv()
        except (EOFError, KeyboardInterrupt):
            break
        try:
            if command == "step":
                pipe.send(("ok", envs.step(data)))
            elif command == "reset":
                pipe.send(("ok", envs.reset(seed=data[0], options=data[1])))
            elif command == "render":
                pipe.send(("ok", envs.render()))
            elif command == "close":
                envs.close()
                pipe.send(("ok", None))
                break
        except Exception:  # noqa: BLE001
            pipe.send(("error", traceback.format_exc()))
    pipe.close()


class ParallelEnvWorkers(gym.vector.VectorEnv):
    """``len(env_fns)`` PettingZoo parallel envs over ``workers`` processes, with ``ParallelEnvBatch``'s API.

    Args:
        env_fns: each makes one parallel env; they are sent to the workers with cloudpickle (lambdas welcome).
        workers: processes, at most one per env; each steps its slice of the envs in order.
        context: the multiprocessing start method ("fork", "spawn", "forkserver"); None: the platform's.
    """

    metadata = ParallelEnvBatch.metadata
    #: seconds ``close`` waits for a worker's answer, then for its exit after each signal
    CLOSE_WAIT_S = 10.0

    def __init__(self, env_fns: Sequence[Callable[[], Any]], workers: int, context: Optional[str] = None) -> None:
        if not env_fns:
            raise ValueError("ParallelEnvWorkers needs at least one env")
        self.num_envs = len(env_fns)
        workers = max(1, min(int(workers), self.num_envs))
        bounds = np.linspace(0, self.num_envs, workers + 1).round().astype(int)
        self._slices = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        ctx = multiprocessing.get_context(context)
        self._pipes, self._processes = [], []
        self.closed = False
        for start, stop in self._slices:
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_serve, args=(child, cloudpickle.dumps(list(env_fns[start:stop])), parent),
                                  name=f"baton-env-worker-{start}-{stop - 1}", daemon=True)
            process.start()
            child.close()
            self._pipes.append(parent)
            self._processes.append(process)
        try:
            spaces = self._gather()[0]
        except EnvWorkerError:
            self.close()  # the workers that did start go with the error
            raise
        for name in SPACES:
            setattr(self, name, spaces[name])
        from gymnasium.vector.utils import batch_space

        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    @property
    def workers(self) -> int:
        return len(self._processes)

    # ---- talking to the workers --------------------------------------------------------------------------
    def _gather(self) -> List[Any]:
        """Every worker's answer, in order; an error or a dead worker raises ``EnvWorkerError`` (the first, once
        every other worker's answer is read: none is left in a pipe to be taken for the next command's)."""
        answers, failure = [], None
        for k, pipe in enumerate(self._pipes):
            start, stop = self._slices[k]
            try:
                status, value = pipe.recv()
            except (EOFError, ConnectionResetError, BrokenPipeError, OSError) as err:
                failure = failure or (self._died(k), err)
                continue
            if status == "error":
                failure = failure or (EnvWorkerError(f"env worker {k} (envs {start}-{stop - 1}) failed:\n{value}"), None)
            answers.append(value)
        if failure is not None:
            raise failure[0] from failure[1]
        return answers

    def _send(self, command: str, per_worker: Sequence[Any]) -> List[Any]:
        for k, (pipe, data) in enumerate(zip(self._pipes, per_worker)):
            try:
                pipe.send((command, data))
            except (BrokenPipeError, ConnectionResetError) as err:
                raise self._died(k) from err
        return self._gather()

    def _died(self, k: int) -> EnvWorkerError:
        start, stop = self._slices[k]
        process = self._processes[k]
        process.join(1)
        return EnvWorkerError(f"env worker {k} (envs {start}-{stop - 1}) died (exit code {process.exitcode}): its "
                              f"envs' process ended without answering")

    # ---- the vector env API (ParallelEnvBatch's) ---------------------------------------------------------
    def reset(self, *, seed: Any = None, options: Optional[dict] = None) -> Tuple[Dict[str, np.ndarray], dict]:
        """Reset every env; ``seed`` an int (env ``i`` gets ``seed + i``) or one per env."""
        seeds = env_seeds(seed, self.num_envs)
        answers = self._send("reset", [(list(seeds[a:b]), options) for a, b in self._slices])
        return _concat([obs for obs, _ in answers]), {}

    def step(self, actions: Any) -> Tuple[Dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict]:
        """``ParallelEnvBatch.step`` over every worker's slice, gathered in env order."""
        actions = np.asarray(actions)
        answers = self._send("step", [actions[a:b] for a, b in self._slices])
        obs = _concat([answer[0] for answer in answers])
        reward, terminated, truncated = (np.concatenate([answer[i] for answer in answers]) for i in (1, 2, 3))
        info: Dict[str, Any] = {"agent_terminated": np.concatenate([a[4]["agent_terminated"] for a in answers])}
        ended = terminated | truncated
        if ended.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            for (start, stop), answer in zip(self._slices, answers):
                if "final_obs" in answer[4]:
                    final_obs[start:stop] = answer[4]["final_obs"]
            info["final_obs"], info["_final_obs"] = final_obs, ended
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        """The first env's frame (``render_mode="rgb_array"``)."""
        self._pipes[0].send(("render", None))
        status, value = self._pipes[0].recv()
        if status == "error":
            raise EnvWorkerError(f"env worker 0 failed to render:\n{value}")
        return value

    def close(self) -> None:
        """Close every env and end the workers (one that does not answer within ``CLOSE_WAIT_S`` is terminated,
        then killed)."""
        if self.closed:
            return
        self.closed = True
        for pipe in self._pipes:
            try:
                pipe.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for pipe, process in zip(self._pipes, self._processes):
            try:
                if pipe.poll(self.CLOSE_WAIT_S):
                    pipe.recv()
            except (EOFError, OSError):
                pass
            process.join(self.CLOSE_WAIT_S)
            if process.is_alive():
                process.terminate()
                process.join(self.CLOSE_WAIT_S / 2)
            if process.is_alive():  # workers outlast a preemption signal (SIGTERM) by design: a hung one is killed
                process.kill()
                process.join(self.CLOSE_WAIT_S / 2)
            pipe.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _concat(rows: List[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    """Workers' observation dicts joined along the env axis."""
    return {key: np.concatenate([row[key] for row in rows]) for key in rows[0]}
