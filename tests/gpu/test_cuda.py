"""The CUDA paths, run on a GPU machine with ``pytest -m gpu`` (skipped without CUDA; CI has no GPU).

Each test is a real training run or launch on the GPU(s) of the machine: nccl in a process group (one
process per GPU), two processes sharing one GPU through gloo, the learner on CUDA with the collector on the
CPU, and the device check on CUDA tensors.
"""
from __future__ import annotations

import copy
import glob
import importlib
import json
import os
import sys

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run with pytest -m gpu on a GPU)")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))  # ddp_workers, importable in spawned processes

DDP_CONFIGS = sorted(os.path.relpath(p, ROOT)[:-3].replace(os.sep, ".") for p in
                     glob.glob(os.path.join(ROOT, "dizoo", "**", "config", "**", "*_ddp_config.py"), recursive=True))


def _small(module_name, exp_dir):
    module = importlib.import_module(module_name)
    main = copy.deepcopy(module.main_config)
    main.exp_name = str(exp_dir)
    main.policy.cuda = True
    main.log = dict(progress=False)
    return main, copy.deepcopy(module.create_config)


def _nccl_worker(module_name, exp_dir):
    from engine.distributed import get_world_size
    from pipelines import serial_pipeline

    assert torch.distributed.get_backend() == "nccl" and get_world_size() >= 1
    summary = serial_pipeline(_small(module_name, exp_dir), max_env_step=256)
    assert summary["env_step"] >= 256


@pytest.mark.parametrize("config", DDP_CONFIGS)
def test_every_ddp_config_runs_with_nccl_on_each_gpu(config, tmp_path):
    """One process per visible GPU (at least one), nccl: DDP wrapping on cuda:LOCAL_RANK and the ddp
    middleware's collectives on the GPU (the bug this issue fixes: a CPU tensor under nccl)."""
    if "atari" in config:
        pytest.importorskip("ale_py")
    from engine import launch

    # a file rendezvous makes a process group even of one process (a 1-GPU machine): nccl is then really used
    launch(_nccl_worker, nprocs=torch.cuda.device_count(), args=(config, tmp_path / "exp"), backend="nccl",
           cuda=True, timeout=120, rendezvous=f"file://{tmp_path}/rendezvous")
    assert json.loads((tmp_path / "exp" / "summary.json").read_text())["env_step"] >= 256


def test_two_ranks_share_one_gpu_through_gloo_and_stay_identical(tmp_path):
    import ddp_workers
    from engine import launch

    overrides = {"0": {"cuda": True}, "1": {"cuda": True}}
    launch(ddp_workers.cartpole_run, nprocs=2, args=(str(tmp_path), overrides, 512), backend="gloo", cuda=True,
           timeout=120)
    runs = [json.load(open(tmp_path / f"run_rank{r}.json")) for r in range(2)]
    assert runs[0]["params"] == runs[1]["params"] and runs[0]["summary"]["train_iter"] > 0


def test_learn_on_cuda_collect_on_cpu(tmp_path):
    from pipelines import build_pipeline

    main, create = _small("dizoo.classic_control.cartpole.config.cartpole_dqn_config", tmp_path / "exp")
    main.policy.device = dict(collect="cpu")
    pipeline = build_pipeline((main, create), max_env_step=512)
    pipeline.run()
    policy = pipeline.policy
    assert next(policy._model.parameters()).is_cuda
    actor = policy._actor("collect")
    assert not next(actor.parameters()).is_cuda
    for a, b in zip(actor.state_dict().values(), policy._model.state_dict().values()):
        assert torch.equal(a, b.cpu())


def test_device_check_names_a_cpu_tensor_in_a_cuda_model():
    import gymnasium as gym
    import numpy as np
    from easydict import EasyDict

    from engine.config import deep_merge
    from policies import DQNPolicy
    from policies.base import DeviceMismatchError

    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(cuda=True, check_device=True)))
    policy = DQNPolicy(cfg, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2))
    policy._model.register_buffer("left_behind", torch.zeros(1))
    with pytest.raises(DeviceMismatchError, match="'left_behind' is on cpu, expected cuda"):
        policy.eval_mode.forward(np.zeros((2, 3), np.float32))
