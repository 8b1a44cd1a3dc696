"""Issue 31 on a GPU (``pytest -m gpu``; skipped without CUDA): dictionary observations (a uint8 image, a vector
and a discrete key) with a legal-action mask train, checkpoint and resume with the learner on cuda and, for the
off-policy algorithms, the replay on cuda (``replay_buffer.device="learn"``: the image leaf kept as uint8 there);
under nccl; and with ``policy.compile`` on cuda. The env (``gpu_dict_envs``) raises on any illegal action, so a
run that ends proves acting stayed legal on the device."""
from __future__ import annotations

import json
import os

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(150),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run with pytest -m gpu on a GPU)")]

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def importable_envs(monkeypatch):
    """gpu_dict_envs, importable here, in the env workers and in spawned ranks."""
    monkeypatch.syspath_prepend(HERE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p))

OFF_POLICY = {"dqn", "rainbow", "sac", "td3"}
DISCRETE, CONTINUOUS = "gpu_dict_envs:BatonGpuDict-v0", "gpu_dict_envs:BatonGpuDictBox-v0"


def dict_config(algo, exp_dir, cuda=True, **policy):
    """``--algo ALGO --env`` one of the dict envs, small, on cuda, the replay beside the learner."""
    from commands.algo_env import build_config

    main, create = build_config(algo, CONTINUOUS if algo in ("sac", "td3") else DISCRETE)
    main.update(exp_name=str(exp_dir), log=dict(progress=False))
    main["env"].update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1)
    main["policy"] = dict(cuda=cuda, eval=dict(evaluator=dict(eval_freq=10_000)), **policy)
    if algo in OFF_POLICY:
        main["policy"]["other"] = dict(replay_buffer=dict(replay_buffer_size=1024, device="learn"))
        main["policy"]["learn"] = dict(batch_size=32)
        main["policy"]["collect"] = dict(n_sample=32)
        if algo in ("sac", "td3"):
            main["policy"]["random_collect_size"] = 64
    else:
        main["policy"]["collect"] = dict(n_sample=64)
        main["policy"]["learn"] = dict(batch_size=32, epoch_per_collect=1)
        if algo == "ppo_lstm":
            main["policy"]["learn"]["seq_len"] = 8
    if algo == "dqn":
        main["policy"]["priority"] = True
    return main, create


@pytest.mark.parametrize("algo", ["dqn", "rainbow", "ppo", "a2c", "ppo_lstm", "sac", "td3"])
def test_dict_observations_train_and_resume_on_cuda(algo, tmp_path):
    from pipelines import build_pipeline

    pipeline = build_pipeline(dict_config(algo, tmp_path / "run"), max_env_step=256)
    first = pipeline.run()
    assert first["env_step"] >= 256 and first["train_iter"] > 0
    assert next(pipeline.policy.model.parameters()).is_cuda
    if algo in OFF_POLICY:
        assert pipeline.buffer.device.type == "cuda"
        sample = pipeline.buffer.sample(8)
        assert sample.obs.image.dtype == torch.uint8 and sample.obs.image.device.type == "cuda"
    resumed = build_pipeline(dict_config(algo, tmp_path / "run"), max_env_step=512, resume=True).run()
    assert resumed["env_step"] >= 512 and resumed["train_iter"] > first["train_iter"]


def _nccl_dict_worker(algo, exp_dir):
    from pipelines import serial_pipeline

    assert torch.distributed.get_backend() == "nccl"
    summary = serial_pipeline(dict_config(algo, exp_dir), max_env_step=256, exp_name=str(exp_dir))
    assert summary["env_step"] >= 256


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_dict_observations_with_masks_under_nccl(algo, tmp_path):
    from engine import launch

    launch(_nccl_dict_worker, nprocs=torch.cuda.device_count(), args=(algo, tmp_path / "exp"), backend="nccl",
           cuda=True, timeout=120, rendezvous=f"file://{tmp_path}/rendezvous")
    assert json.loads((tmp_path / "exp" / "summary.json").read_text())["env_step"] >= 256


@pytest.mark.parametrize("algo,mode", [("dqn", "cudagraph"), ("ppo", "compile")])
def test_compiled_dict_observations_train_on_cuda(algo, mode, tmp_path):
    from pipelines import build_pipeline

    pipeline = build_pipeline(dict_config(algo, tmp_path / "run", compile=mode), max_env_step=256)
    summary = pipeline.run()
    assert summary["env_step"] >= 256 and summary["train_iter"] > 0
    paths = pipeline.policy.hot_paths.values()
    assert paths and all(p.fallback_error is None for p in paths), [(p.name, p.fallback_error) for p in paths]
