"""The order of CUDA calls when a rank joins an nccl group, and CUDA kept out of forked processes (issue 24,
suspected faults), checked on CPU with the CUDA and process-group calls recorded instead of made.

Why it matters: nccl's barrier and object collectives run on ``torch.cuda.current_device()``. A rank that
joins before ``torch.cuda.set_device`` runs them on GPU 0 whatever its model's device, so two ranks share a
GPU (a hang or "duplicate GPU detected"). And a process that forks after touching CUDA hands its child a
context the child cannot use: a CUDA call there fails or hangs.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import engine.distributed as distributed
from engine.distributed import DDPContext


class _Recorder:
    """Stands in for ``torch.cuda.set_device``/``current_device`` and the process-group calls."""

    def __init__(self, initialized: bool) -> None:
        self.calls = []
        self.current = 0
        self.initialized = initialized

    def set_device(self, device) -> None:
        self.current = torch.device(device).index if isinstance(device, str) else int(device)
        self.calls.append(("set_device", self.current))

    def init_process_group(self, backend, **kwargs) -> None:
        self.calls.append(("init_process_group", self.current))
        self.initialized = True

    def barrier(self, device_ids=None) -> None:
        self.calls.append(("barrier", tuple(device_ids or ())))


@pytest.fixture
def recorder(monkeypatch):
    def install(initialized: bool) -> _Recorder:
        rec = _Recorder(initialized)
        for key, value in dict(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
                               MASTER_ADDR="127.0.0.1", MASTER_PORT="29999", BATON_DDP_GUARD="0").items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(distributed, "visible_gpu_count", lambda: 2)
        monkeypatch.setattr(distributed, "rendezvous_store", lambda *a, **k: None)
        monkeypatch.setattr(torch.cuda, "set_device", rec.set_device)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: rec.current)
        monkeypatch.setattr(dist, "init_process_group", rec.init_process_group)
        monkeypatch.setattr(dist, "is_initialized", lambda: rec.initialized)
        monkeypatch.setattr(dist, "get_backend", lambda *a: "nccl")
        monkeypatch.setattr(dist, "get_rank", lambda *a: 1)
        monkeypatch.setattr(dist, "get_world_size", lambda *a: 2)
        monkeypatch.setattr(dist, "barrier", rec.barrier)
        monkeypatch.setattr(dist, "destroy_process_group", lambda *a: rec.calls.append(("destroy", rec.current)))
        monkeypatch.setattr(distributed.PROGRESS, "start", lambda rank: None)
        monkeypatch.setattr(distributed.PROGRESS, "stop", lambda: None)
        return rec
    return install


def test_a_new_nccl_rank_sets_its_device_before_it_joins(recorder):
    rec = recorder(initialized=False)
    with DDPContext(backend="nccl", cuda=True) as ctx:
        assert ctx.device == "cuda:1"
    assert rec.calls[:2] == [("set_device", 1), ("init_process_group", 1)]
    assert ("barrier", (1,)) in rec.calls  # the exit barrier on this rank's GPU, not GPU 0


def test_a_rank_joining_a_group_made_elsewhere_sets_its_device(recorder):
    """A user's ``mp.spawn`` that called ``init_process_group`` itself, without ``set_device``."""
    rec = recorder(initialized=True)
    with DDPContext(backend="nccl", cuda=True) as ctx:
        assert ctx.device == "cuda:1"
        distributed.barrier()
    assert rec.calls == [("set_device", 1), ("barrier", (1,))]


_TRAP = """
import sys, torch, torch.cuda
def trap(*args, **kwargs):
    raise SystemExit("CUDA was initialised: " + repr(args))
torch.cuda._lazy_init = trap
"""


def test_the_launchers_fork_server_preload_never_initialises_cuda():
    """``engine.launch``'s fork server imports ``_PRELOAD`` once and forks every rank from it: a CUDA context
    there would be inherited by every rank. CUDA initialises lazily through ``torch.cuda._lazy_init`` (C++
    allocations call it too), so a trap installed right after ``import torch`` catches any initialisation."""
    from engine.launcher import _PRELOAD

    code = _TRAP + "\nimport importlib\nfor name in %r:\n    importlib.import_module(name)\n" % (_PRELOAD,)
    code += "assert not torch.cuda.is_initialized()\nprint('ok')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]

