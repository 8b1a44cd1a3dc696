"""A run with ``policy.obs_norm=True`` (and PPO's ``policy.reward_norm=True``) through the commands after training: ``baton eval`` and ``baton export``
act with the checkpoint's statistics; resuming it without normalisation is one ``baton:`` line naming the fix."""
from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from commands.cli import main
from commands.saved_run import load_saved_run
from trained_runs import SMALL, SMALL_BY_ALGO, train_tiny


@pytest.fixture(scope="module")
def normalised_run(tmp_path_factory):
    return train_tiny(str(tmp_path_factory.mktemp("runs")), "ppo", "Pendulum-v1", extra=["policy.obs_norm=true",
                                                                                        "policy.reward_norm=true"])


def test_eval_and_export_act_with_the_checkpoints_statistics(normalised_run, capsys, tmp_path):
    saved = load_saved_run(normalised_run, "latest")
    stats = saved.state["policy"]["obs_norm"]
    with open(os.path.join(normalised_run, "summary.json")) as f:
        env_step = json.load(f)["env_step"]
    assert float(stats["count"]) == env_step  # every collected step, once
    assert float(saved.state["policy"]["reward_norm"]["count"]) == env_step  # a discounted return per step
    assert torch.equal(saved.policy.normalisation.obs_norm.mean, stats["mean"])
    assert main(["eval", normalised_run, "--ckpt", "latest", "--episodes", "2"]) == 0
    assert main(["export", normalised_run, "--format", "torchscript", "--ckpt", "latest", "-o",
                 str(tmp_path / "p.pt")]) == 0
    capsys.readouterr()
    env = gym.make("Pendulum-v1")
    obs = np.stack([env.reset(seed=s)[0] for s in range(6)]).astype(np.float32)
    exported = torch.jit.load(str(tmp_path / "p.pt"))(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(exported, saved.policy.eval_mode.forward(torch.from_numpy(obs))["action"], rtol=1e-5, atol=1e-6)


def test_resuming_without_normalisation_names_the_problem_and_the_fix(normalised_run, capsys):
    config = os.path.join(normalised_run, "config.json")
    with pytest.raises(SystemExit) as stop:  # the same run's settings but the switch
        main(["train", "--algo", "ppo", "--env", "Pendulum-v1", "--exp-name", normalised_run, "--resume",
              "--max-env-step", "512", *SMALL, *SMALL_BY_ALGO["ppo"], "policy.obs_norm=false"])
    code = stop.value.code
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("baton: ") and "Traceback" not in err, err
    assert "holds observation-normalisation statistics" in err and "policy.obs_norm=true" in err, err
    assert os.path.isfile(config)
