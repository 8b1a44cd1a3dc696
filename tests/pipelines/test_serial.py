"""serial_pipeline end to end: files it writes, resume, bad input."""
from __future__ import annotations

import json
import os

import pytest

from pipelines import serial_pipeline
from pipelines.run_dir import RunDirError
from middleware import CheckpointError
from policies import NonFiniteLossError, SpaceMismatchError


def test_serial_pipeline_writes_config_summary_ckpt_and_log(quick_cartpole_config):
    main, create = quick_cartpole_config
    summary = serial_pipeline((main, create), seed=0, max_env_step=320)
    exp = summary["run_dir"]
    assert exp == main.exp_name + "_seed0"  # the default run directory carries the seed
    with open(os.path.join(exp, "summary.json")) as f:
        on_disk = json.load(f)
    assert on_disk == summary
    for key in ("stop_reason", "eval_return", "best_eval_return", "env_step", "train_iter", "wall_time_s"):
        assert key in summary
    assert summary["stop_reason"] in ("max_env_step", "stop_value")
    assert summary["env_step"] >= 320 or summary["stop_reason"] == "stop_value"
    assert summary["train_iter"] > 0
    assert os.path.isfile(os.path.join(exp, "config.json"))
    assert os.path.isfile(os.path.join(exp, "ckpt", "latest.pth.tar"))
    assert os.path.isfile(os.path.join(exp, "ckpt", "best.pth.tar"))
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(os.path.join(exp, "log")))


def test_serial_pipeline_resume_restores_counters(quick_cartpole_config):
    from middleware.checkpoint import load_checkpoint
    main, create = quick_cartpole_config
    main.env.stop_value = 1e9  # run to the budget
    main.ckpt = dict(save_replay_buffer=True)
    first = serial_pipeline((main, create), seed=0, max_env_step=256)
    ckpt = load_checkpoint(os.path.join(first["run_dir"], "ckpt", "latest.pth.tar"))
    assert ckpt["ctx"]["env_step"] == first["env_step"] and ckpt["ctx"]["train_iter"] == first["train_iter"]
    waiting = (main.policy.nstep - 1) * main.env.collector_env_num  # n-step windows not yet complete
    assert len(ckpt["replay_buffer"]["storage"]["fields"]["obs"]) == first["env_step"] - waiting
    second = serial_pipeline((main, create), seed=0, max_env_step=512, resume=True)
    assert second["run_dir"] == first["run_dir"]  # --resume without a name continues the newest run of the seed
    # counters continued from the checkpoint: one collect of 32 per iteration, no restart from zero
    assert second["env_step"] == 512
    assert second["train_iter"] > first["train_iter"]


def test_serial_pipeline_resume_without_checkpoint_names_path(quick_cartpole_config):
    main, create = quick_cartpole_config
    with pytest.raises(RunDirError, match="no run to continue at .*exp_seed0"):
        serial_pipeline((main, create), resume=True, max_env_step=64)
    os.makedirs(os.path.join(main.exp_name, "log"))  # a directory without checkpoints
    with pytest.raises(CheckpointError, match="no checkpoint to resume from in .*exp/ckpt"):
        serial_pipeline((main, create), resume=True, exp_name=main.exp_name, max_env_step=64)


def test_serial_pipeline_model_shape_mismatch_fails_at_start(quick_cartpole_config):
    main, create = quick_cartpole_config
    main.policy.model.obs_shape = 8
    with pytest.raises(SpaceMismatchError, match=r"obs_shape=8.*\(4,\)"):
        serial_pipeline((main, create), max_env_step=64)
    assert not os.path.exists(os.path.join(main.exp_name, "summary.json"))  # failed before the loop


def test_serial_pipeline_nan_loss_stops_and_keeps_last_good_checkpoint(quick_cartpole_config):
    main, create = quick_cartpole_config
    main.env.stop_value = 1e9
    serial_pipeline((main, create), seed=0, max_env_step=256, exp_name=main.exp_name)
    latest = os.path.join(main.exp_name, "ckpt", "latest.pth.tar")
    good = open(latest, "rb").read()
    main.policy.learn.learning_rate = 1e30  # the resumed run diverges at once
    main.policy.learn.td_loss = "mse"
    with pytest.raises(NonFiniteLossError, match="learning_rate"):
        serial_pipeline((main, create), max_env_step=20000, resume=True, exp_name=main.exp_name)
    summary = json.load(open(os.path.join(main.exp_name, "summary.json")))
    assert summary["stop_reason"].startswith("error")
    assert open(latest, "rb").read() == good  # the last good checkpoint, as it was


def test_serial_pipeline_continuous_policy_on_discrete_env_names_policy_env_and_space(quick_cartpole_config):
    main, create = quick_cartpole_config
    create.policy.type = "sac"
    main.policy = dict(cuda=False)
    with pytest.raises(SpaceMismatchError, match=r"CartPole-v1.*'sac'.*continuous.*Discrete\(2\)"):
        serial_pipeline((main, create), max_env_step=64)
