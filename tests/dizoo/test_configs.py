"""Every dizoo config runs as a script for a few steps (CleanRL's habit), with the common options."""
from __future__ import annotations

import glob
import json
import os
import runpy
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the DDP configs train under torchrun in tests/engine/test_distributed.py, and so do the Pong 8-env configs
# they are built on (the same settings per rank; a Pong smoke run here costs seconds each)
CONFIGS = sorted(p for p in glob.glob(os.path.join(ROOT, "dizoo", "**", "config", "**", "*_config.py"), recursive=True)
                 if not p.endswith(("_ddp_config.py", "_8env_config.py")))


# Pong's first evaluation plays whole games (a minute here): the smoke runs cut them short, on 4 envs
# (the GPU configs start 64); PPO's iteration of 8,192 steps x 4 epochs of the CNN is cut to a small one, and
# DQN's 10k random steps and 64 updates per collect to a few
QUICK_ATARI = ["env.max_episode_steps=64", "env.evaluator_env_num=2", "env.n_evaluator_episode=2",
               "env.collector_env_num=4"]
QUICK_ATARI_PPO = ["policy.collect.n_sample=64", "policy.learn.epoch_per_collect=1", "policy.learn.batch_size=64"]
QUICK_ATARI_DQN = ["policy.random_collect_size=0", "policy.learn.update_per_collect=4"]


# MuJoCo: HalfCheetah's evaluation plays 5 episodes of 1,000 steps, PPO's first learn is 320 updates: cut short
QUICK_MUJOCO = ["env.max_episode_steps=64", "env.evaluator_env_num=2", "env.n_evaluator_episode=2"]
QUICK_MUJOCO_PPO = ["policy.collect.n_sample=64", "policy.learn.epoch_per_collect=1"]


def _quick(path):
    if "mujoco" in path:
        return QUICK_MUJOCO + (QUICK_MUJOCO_PPO if "ppo" in path else [])
    if "atari" not in path:
        return []
    return QUICK_ATARI + (QUICK_ATARI_PPO if "ppo" in os.path.basename(path) else QUICK_ATARI_DQN)


def _needs(path):
    return ["Box2D", "pygame"] if "box2d" in path else ["ale_py"] if "atari" in path else \
        ["mujoco"] if "mujoco" in path else []


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(p) for p in CONFIGS])
def test_dizoo_config_runs_as_script(path, tmp_path, monkeypatch, capsys):
    """Its ``__main__`` block with the common options, in this interpreter (a new one per config would
    cost seconds of imports each; one config runs in a fresh interpreter below)."""
    for module in _needs(path):
        pytest.importorskip(module)
    exp = tmp_path / "exp"
    monkeypatch.chdir(tmp_path)
    # --local-rank=0 is what torch.distributed.launch appends: it must be accepted
    monkeypatch.setattr(sys, "argv", [path, "--seed", "1", "--max-env-step", "200", "--exp-name", str(exp),
                                      "--no-progress", "--local-rank=0"] + _quick(path))
    runpy.run_path(path, run_name="__main__")
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["env_step"] >= 1 and summary["stop_reason"] in ("max_env_step", "stop_value")
    assert "baton: " in capsys.readouterr().out


def test_a_config_runs_as_a_script_in_its_own_interpreter(tmp_path):
    path = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_ppo_config.py")
    proc = subprocess.run([sys.executable, path, "--max-env-step", "200", "--exp-name", str(tmp_path / "exp"),
                           "--no-progress", "--local-rank=0"], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "exp" / "summary.json").read_text())["env_step"] >= 200


def test_dizoo_config_module_defines_configs():
    for path in CONFIGS:
        ns = runpy.run_path(path, run_name="not_main")
        assert "main_config" in ns and "create_config" in ns, path


# the MuJoCo DDP configs are compiled here, not trained under torchrun (each would start MuJoCo on 2 ranks in the
# suite's torchrun job): their algorithms train under DDP with the Pendulum configs, the MuJoCo envs with the
# single-process configs above; hopper_ppo_ddp (PPO with policy.obs_norm on MuJoCo) trains in that job
MUJOCO_DDP = sorted(glob.glob(os.path.join(ROOT, "dizoo", "mujoco", "config", "*_ddp_config.py")))


@pytest.mark.parametrize("path", MUJOCO_DDP, ids=[os.path.basename(p) for p in MUJOCO_DDP])
def test_mujoco_ddp_config_compiles_to_its_base_config_made_data_parallel(path):
    from engine.config import compile_config
    from commands.config_file import load_config_file

    ddp = compile_config(*load_config_file(path), save=False)
    base = compile_config(*load_config_file(path.replace("_ddp_config.py", "_config.py")), save=False)
    assert ddp.policy.multi_gpu and not base.policy.multi_gpu
    assert (ddp.env.type, ddp.policy.type, ddp.policy.obs_norm) == (base.env.type, base.policy.type, base.policy.obs_norm)
    if ddp.policy.type == "ppo":  # one process's data per update, split over 2 ranks
        assert ddp.policy.collect.n_sample * 2 == base.policy.collect.n_sample
        assert ddp.policy.learn.batch_size * 2 == base.policy.learn.batch_size
    else:  # one process's settings per rank
        assert ddp.policy.learn == base.policy.learn and ddp.policy.collect == base.policy.collect
