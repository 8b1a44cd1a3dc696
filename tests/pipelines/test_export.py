"""baton export: the greedy policy of a run as one TorchScript or ONNX file, acting as the policy does on
observations recorded from its env, and running without baton; bad input is one ``baton:`` line, exit 2."""
from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from commands.cli import main
from commands.export import export_policy, export_run
from commands.saved_run import load_saved_run
from policies.greedy import GreedyActor, NotExportableError
from trained_runs import train_tiny

RUNS = [("dqn", "CartPole-v1"), ("ppo", "CartPole-v1"), ("ppo", "Pendulum-v1"), ("sac", "Pendulum-v1"),
        ("rainbow", "CartPole-v1")]  # a distributional head on noisy layers: their expected values, the mean weights


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("runs"))
    return {run: train_tiny(root, *run) for run in RUNS}


def _recorded_observations(run_dir, steps=64):
    """Observations the run's policy meets in its env (greedy, 4 envs), and its eval mode's actions on them."""
    saved = load_saved_run(run_dir)
    env = gym.make_vec(saved.cfg.env.env_id, num_envs=4, vectorization_mode="sync")
    obs, _ = env.reset(seed=11)
    recorded, actions = [], []
    for _ in range(steps // 4):
        action = saved.policy.eval_mode.forward(torch.from_numpy(obs))["action"].numpy()
        recorded.append(obs)
        actions.append(action)
        obs, *_ = env.step(action)
    env.close()
    return np.concatenate(recorded), np.concatenate(actions)


def _run_file(path, fmt, obs):
    if fmt == "torchscript":
        return torch.jit.load(path)(torch.as_tensor(obs)).numpy()
    import onnxruntime

    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"obs": obs})[0]


# ONNX export takes seconds a policy: the fast tests export DQN's (and test_exported_files_run_without_baton's)
CASES = [(run, fmt) if fmt == "torchscript" or run == RUNS[0] else pytest.param(run, fmt, marks=pytest.mark.slow)
         for fmt in ("torchscript", "onnx") for run in RUNS]


@pytest.mark.parametrize("run, fmt", CASES, ids=[f"{a}-{e}-{f}" for f in ("torchscript", "onnx") for a, e in RUNS])
def test_exported_file_acts_as_the_policy_on_recorded_observations(runs, run, fmt, tmp_path):
    if fmt == "onnx":
        pytest.importorskip("onnxscript")
        pytest.importorskip("onnxruntime")
    obs, expected = _recorded_observations(runs[run])
    info = export_run(runs[run], fmt, output=str(tmp_path / f"policy.{fmt}"))
    assert info["path"] == str(tmp_path / f"policy.{fmt}") and os.listdir(tmp_path) == [f"policy.{fmt}"]  # one file
    got = _run_file(info["path"], fmt, obs)
    assert got.shape == expected.shape
    if expected.dtype.kind in "iu":
        assert np.array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert (np.abs(got) <= 2.0).all()  # Pendulum's torque bounds


def test_exported_files_run_without_baton(runs, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    run = runs[("dqn", "CartPole-v1")]
    assert main(["export", run, "--format", "torchscript"]) == 0
    assert main(["export", run, "--format", "onnx", "--ckpt", "latest", "-o", str(tmp_path / "p.onnx")]) == 0
    out = capsys.readouterr().out
    pt = os.path.join(run, "policy_best.pt")
    assert f"wrote {pt}" in out and "obs float32[batch, 4] -> action of Discrete(2)" in out
    script = ("import sys, numpy as np, torch, onnxruntime\n"
              "obs = np.zeros((5, 4), np.float32)\n"
              f"a = torch.jit.load({pt!r})(torch.as_tensor(obs)).numpy()\n"
              f"b = onnxruntime.InferenceSession({str(tmp_path / 'p.onnx')!r}).run(None, {{'obs': obs}})[0]\n"
              "assert a.shape == b.shape == (5,), (a, b)\n"
              "ours = [m for m in ('engine', 'data', 'middleware', 'policies', 'pipelines') if m in sys.modules]\n"
              "assert not ours, ours\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_export_of_an_atari_cnn_policy_takes_uint8_frames(tmp_path):
    from engine.config import compile_config
    from policies.dqn import DQNPolicy

    cfg = compile_config({"exp_name": "x", "env": {"type": "cartpole"}, "policy": {"type": "dqn", "model": dict(
        encoder_hidden_size_list=[16])}}, save=False)
    space = gym.spaces.Box(0, 255, (2, 84, 84), np.uint8)
    policy = DQNPolicy(cfg.policy, space, gym.spaces.Discrete(6))
    path = export_policy(policy, space, str(tmp_path / "pong.pt"), "torchscript")
    frames = np.random.default_rng(0).integers(0, 256, (3, 2, 84, 84), dtype=np.uint8)
    assert np.array_equal(torch.jit.load(path)(torch.as_tensor(frames)).numpy(), policy.eval_mode.forward(torch.from_numpy(frames))["action"].numpy())


# ---- bad input -----------------------------------------------------------------------------------------
class _DataDependent(torch.nn.Module):
    """Takes its input through numpy (a trace bakes the example batch in: the check of the file on another
    batch catches it) and branches on a value (the ONNX exporter cannot export data-dependent control flow)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, obs):
        x = torch.from_numpy(obs.detach().numpy())
        return self.linear(x) if x.sum() > 0 else -self.linear(x)


class _Policy:
    def __init__(self, module=None):
        self._module = module

    def greedy_module(self):
        if self._module is None:
            raise NotExportableError("policy _Policy (tests) defines no greedy_module()")
        return self._module


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_a_part_that_cannot_be_exported_is_named(tmp_path, fmt):
    if fmt == "onnx":
        pytest.importorskip("onnxscript")
    space = gym.spaces.Box(-1, 1, (4,), np.float32)
    with pytest.raises(NotExportableError, match=r"_Policy's greedy module GreedyActor\(_DataDependent\)"):
        export_policy(_Policy(GreedyActor(_DataDependent(), discrete=True)), space, str(tmp_path / "p"), fmt)
    with pytest.raises(NotExportableError, match="defines no greedy_module"):
        export_policy(_Policy(), space, str(tmp_path / "p"), fmt)


def test_export_bad_input_is_one_line(runs, tmp_path, capsys, monkeypatch):
    assert main(["export", str(tmp_path / "absent"), "--format", "onnx"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such run directory" in err
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if the export extra were not installed
    assert main(["export", runs[("dqn", "CartPole-v1")], "--format", "onnx", "-o", str(tmp_path / "p.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and '".[export]"' in err
    with pytest.raises(SystemExit):
        main(["export", runs[("dqn", "CartPole-v1")], "--format", "tflite"])


def test_an_unwritable_output_is_one_line_naming_the_place(runs, tmp_path, capsys):
    """Issue 34: ``-o RUN/config.json/x.pt`` (a path under a file) was a FileExistsError traceback."""
    run_dir = runs[("dqn", "CartPole-v1")]
    under_a_file = os.path.join(run_dir, "config.json", "x.pt")
    assert main(["export", run_dir, "--format", "torchscript", "-o", under_a_file]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"baton: cannot write {under_a_file}: ") and "config.json is a file" in err
    assert "give -o a file in a directory you can write" in err


@pytest.mark.parametrize("failure", ["disk full", "interrupted"])
def test_a_failed_write_leaves_no_part_of_a_file(runs, tmp_path, capsys, monkeypatch, failure):
    """Issue 34: a full disk left a half-written file where a good one belongs (8,192 of 31,965 bytes); the
    file is written aside and renamed, so a failure leaves the earlier file, or none."""
    import errno

    import torch.jit

    run_dir = runs[("dqn", "CartPole-v1")]
    out = tmp_path / "policy.pt"
    out.write_bytes(b"an earlier export")
    real_save = torch.jit.ScriptModule.save

    def save_then_fail(self, path, *args, **kwargs):
        real_save(self, path, *args, **kwargs)  # the bytes are there, then the disk fills or Ctrl-C comes
        if failure == "disk full":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch.jit.ScriptModule, "save", save_then_fail)
    if failure == "disk full":
        assert main(["export", run_dir, "--format", "torchscript", "-o", str(out)]) == 1  # the machine's, not input
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"cannot write {out}: no space left on device" in err
        assert "the previous version is unchanged" in err
    else:
        with pytest.raises(KeyboardInterrupt):
            export_run(run_dir, "torchscript", output=str(out))
    assert out.read_bytes() == b"an earlier export" and sorted(os.listdir(tmp_path)) == ["policy.pt"]
