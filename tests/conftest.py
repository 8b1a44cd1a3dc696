"""Shared fixtures: a tiny deterministic env whose observations count steps, and a quick DQN config."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from easydict import EasyDict

from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY


class CountingEnv(gym.Env):
    """obs = [step index within the episode, episode id]; reward = 1 per step; terminates at step
    ``terminate_at`` (None: never). Truncation comes from gymnasium's TimeLimit (max_episode_steps)."""

    def __init__(self, terminate_at=None):
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at = terminate_at
        self._t = 0
        self._episode = -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._episode += 1
        return np.array([self._t, self._episode], np.float32), {}

    def step(self, action):
        self._t += 1
        terminated = self.terminate_at is not None and self._t >= self.terminate_at
        return np.array([self._t, self._episode], np.float32), 1.0, terminated, False, {}


if "BatonCounting-v0" not in gym.registry:
    gym.register("BatonCounting-v0", entry_point=CountingEnv)
ENV_REGISTRY.register("counting", GymEnvType("BatonCounting-v0", stop_value=1e9, max_episode_steps=5))


@pytest.fixture
def quick_cartpole_config(tmp_path):
    """The dizoo CartPole DQN config, shrunk for fast tests, writing under tmp_path."""
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

    main = copy.deepcopy(main_config)
    main.exp_name = str(tmp_path / "exp")
    main.log = EasyDict(dict(progress=False))
    main.env.collector_env_num = 4
    main.env.evaluator_env_num = 2
    main.env.n_evaluator_episode = 2
    main.policy.collect.n_sample = 32
    main.policy.learn.update_per_collect = 2
    main.policy.eval.evaluator.eval_freq = 20
    return main, copy.deepcopy(create_config)


# ---- a full disk -------------------------------------------------------------------------------------
#: what torch.save raises when the disk fills mid-write, over the OSError of the file object it writes to
#: (torch 2.13 on a full tmpfs); writing to a path instead, the error it raises over has no errno at all
TORCH_FULL_DISK_ERROR = "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"


def torch_save_on_a_full_disk(obj, f, *args, **kwargs):
    """``torch.save`` as it fails on a full disk: part of the file written, then ENOSPC, then torch's own
    error raised over it."""
    import errno
    import os

    f.write(b"PK\x03\x04 the first records of a checkpoint")
    try:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError:
        raise RuntimeError(TORCH_FULL_DISK_ERROR)


@pytest.fixture
def full_disk(monkeypatch):
    """Call it to fill the disk: from then on every checkpoint write fails as on a full disk (``torch.save``
    as above, no free space left); other files still write."""
    import collections
    import shutil

    import torch

    def fill() -> None:
        monkeypatch.setattr(torch, "save", torch_save_on_a_full_disk)
        usage = collections.namedtuple("usage", "total used free")
        monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, 1 << 30, 0))
    return fill


# ---- worker processes of a killed process ---------------------------------------------------------------
@pytest.fixture
def outliving():
    """Call it with the pids of a killed process's workers: the ones still alive after ``within_s`` seconds (each
    then killed, so that a failing test leaves none behind)."""
    import os
    import signal
    import time

    def alive_after(pids, within_s: float = 20.0):
        deadline = time.monotonic() + within_s
        while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
        for pid in alive:
            os.kill(pid, signal.SIGKILL)
        return alive
    return alive_after


# ---- offline datasets ---------------------------------------------------------------------------------
# the dataset names the dizoo offline configs train from, and the gymnasium id each was recorded on
OFFLINE_CONFIG_DATASETS = {"cartpole/expert-v0": "CartPole-v1", "cartpole/medium-v0": "CartPole-v1",
                           "pendulum/medium-v0": "Pendulum-v1"}


@pytest.fixture(scope="session", autouse=True)
def offline_dataset_root(tmp_path_factory):
    """``MINARI_DATASETS_PATH`` for the whole session (subprocesses inherit it): tiny datasets of random
    episodes under the names the dizoo offline configs name, so every config runs as a script and under
    torchrun without the reference datasets, and no test reads or writes ~/.minari. Tests that learn build
    real datasets of their own."""
    import os

    try:
        from data.offline import Episode, write_dataset
    except ImportError:
        yield None
        return
    try:
        import minari  # noqa: F401
    except ImportError:
        yield None
        return
    root = str(tmp_path_factory.mktemp("minari_datasets"))
    for name, env_id in OFFLINE_CONFIG_DATASETS.items():
        env = gym.make(env_id)
        env.observation_space.seed(0)
        env.action_space.seed(0)
        episodes = []
        for i in range(8):
            steps = 20
            end = np.zeros(steps, bool)
            end[-1] = True
            episodes.append(Episode(np.stack([env.observation_space.sample() for _ in range(steps + 1)]),
                                    np.stack([env.action_space.sample() for _ in range(steps)]),
                                    np.ones(steps, np.float32), end if i % 2 else np.zeros(steps, bool),
                                    np.zeros(steps, bool) if i % 2 else end))
        write_dataset(name, episodes, env.observation_space, env.action_space, root=root, env_id=env_id)
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = root
    yield root
    if previous is None:
        os.environ.pop("MINARI_DATASETS_PATH", None)
    else:
        os.environ["MINARI_DATASETS_PATH"] = previous


# ---- parallel runs (pytest-xdist) ---------------------------------------------------------------------
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pytest.ini): one worker per usable core, at most 4. Many tests start several processes
    each (DDP ranks, launchers), so more workers than cores would only make them wait on each other."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 4))


# ---- Ctrl-C must reach the commands tests start --------------------------------------------------------
def _sigint_ignored_or_blocked() -> str:
    """What the kernel says of SIGINT in this process ("" when it is delivered as a terminal would): an ignored
    or blocked SIGINT is inherited by every command a later test starts, which would then never see Ctrl-C."""
    import signal

    bit = 1 << (signal.SIGINT - 1)
    found = []
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("SigIgn", "SigBlk") and int(value.strip(), 16) & bit:
                found.append("ignored" if name == "SigIgn" else "blocked")
    return " and ".join(found)


@pytest.fixture(autouse=True)
def sigint_left_as_found():
    """A test that leaves SIGINT ignored or blocked in the test process fails by name, not the Ctrl-C tests that
    happen to run after it on the same worker (seen once on a loaded machine: two Ctrl-C tests on one worker
    found their commands deaf to SIGINT)."""
    import os

    if not os.path.exists("/proc/self/status"):
        yield
        return
    before = _sigint_ignored_or_blocked()
    yield
    after = _sigint_ignored_or_blocked()
    assert after == before, f"this test left SIGINT {after or 'delivered'} in the test process (was {before or 'delivered'})"


# ---- the long files first ------------------------------------------------------------------------------
def _weight(item) -> int:
    """How early ``item``'s file should start: the documented commands (minutes each file), then files with
    learning tests, then files that launch processes, then the rest."""
    name = item.path.name
    if name.startswith("test_doc_commands"):
        return 3
    if item.get_closest_marker("slow") is not None:
        return 2
    if item.get_closest_marker("distributed") is not None:
        return 1
    return 0


def pytest_collection_modifyitems(session, config, items):
    """Files in order of their heaviest test (``_weight``), each file's tests kept together and in order.
    ``--dist loadfile`` hands files to the workers in collection order; in path order the documented commands
    (tests/test_doc_commands*.py, a third of the suite) came last, and one worker ran them alone at the end."""
    weight = {}
    for item in items:
        weight[item.path] = max(weight.get(item.path, 0), _weight(item))
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(item.path, i)
    items.sort(key=lambda item: (-weight[item.path], first_seen[item.path]))
