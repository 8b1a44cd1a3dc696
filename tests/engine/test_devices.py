"""Backend and device choice, with the GPU count simulated: no CUDA is touched before the checks."""
from __future__ import annotations

import pytest

from engine.devices import DeviceError, parse_device, rank_device, resolve_backend
from engine.distributed import DDPContext


@pytest.mark.parametrize("backend,cuda,local,gpus,expected", [
    ("auto", True, 2, 2, "nccl"),
    ("auto", True, 4, 2, "gloo"),     # GPUs shared: gloo, with a warning
    ("auto", False, 2, 8, "gloo"),    # a CPU run stays on gloo where GPUs exist
    ("auto", True, 1, 0, "gloo"),
    ("gloo", True, 4, 1, "gloo"),
    ("nccl", True, 2, 2, "nccl"),
])
def test_resolve_backend(backend, cuda, local, gpus, expected):
    assert resolve_backend(backend, cuda, local, gpus) == expected


def test_nccl_with_more_local_ranks_than_gpus_names_both_fixes():
    with pytest.raises(DeviceError) as err:
        resolve_backend("nccl", True, local_world=2, gpus=1)
    message = str(err.value)
    assert "runs 2 processes and sees 1 GPU" in message
    assert "--nproc_per_node=1" in message and "ddp.backend='gloo'" in message


def test_nccl_without_gpus_and_unknown_backend():
    with pytest.raises(DeviceError, match="needs CUDA GPUs, but none is visible"):
        resolve_backend("nccl", True, 1, 0)
    with pytest.raises(DeviceError, match="'mpi' is not one of auto, nccl, gloo"):
        resolve_backend("mpi", False, 1, 0)


def test_rank_devices_nccl_own_gpu_gloo_shares_round_robin():
    assert [rank_device("nccl", True, r, 4) for r in range(2)] == ["cuda:0", "cuda:1"]
    assert [rank_device("gloo", True, r, 2) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert rank_device("gloo", False, 3, 2) == "cpu"


def test_ddp_context_refuses_nccl_before_any_cuda_call(monkeypatch):
    """Two local ranks, one (simulated) GPU, nccl asked: a clear error, not "invalid device ordinal".
    On this CPU build any CUDA call would raise a different error, so the check must come first."""
    monkeypatch.setattr("engine.distributed.visible_gpu_count", lambda: 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(DeviceError, match="sees 1 GPU"):
        with DDPContext(backend="nccl", cuda=True, timeout=5):
            pass


@pytest.mark.parametrize("spec,message", [
    ("gpu0", "is not a device torch knows"),
    ("cuda:2", "sees 1 GPU; use cuda:0 .. cuda:0"),
    ("cuda", "sees 0 GPUs; use 'cpu'"),
    (3, "is not a device torch knows"),
])
def test_parse_device_names_the_key(spec, message):
    gpus = 1 if spec == "cuda:2" else 0
    with pytest.raises(DeviceError, match=message) as err:
        parse_device(spec, "policy.device.collect", gpus=gpus)
    assert "policy.device.collect" in str(err.value)


def test_parse_device_accepts_valid_ones():
    assert parse_device("cuda:1", "k", gpus=2) == "cuda:1" and parse_device(" cpu ", "k") == "cpu"


@pytest.fixture
def restore_threads():
    import torch
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_torch_threads_are_this_process_share_of_the_cores(restore_threads, monkeypatch):
    import os

    import torch

    from engine.devices import size_torch_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert size_torch_threads(0, local_world=2) == 3 and torch.get_num_threads() == 3  # 8 / 2, one left to the env
    assert size_torch_threads(0, local_world=4) == 1
    assert size_torch_threads(0, local_world=16) == 1          # at least one
    assert size_torch_threads(3, local_world=2) == 3           # the config key wins
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(1)  # as in a rank forked from a server whose OpenMP runtime read another value
    assert size_torch_threads(0, local_world=8) == 2 and torch.get_num_threads() == 2  # the user's value, applied
    monkeypatch.setenv("OMP_NUM_THREADS", "2,1")  # an OpenMP list: left to the runtime
    assert size_torch_threads(0, local_world=8) == torch.get_num_threads() == 2
