"""The offline pipeline end to end, small and fast: record a dataset from a checkpoint (terminated and
truncated kept apart), train BC and CQL on it, and the bad inputs a user meets first."""
from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

pytest.importorskip("minari")

from data.offline import DatasetNotFoundError, DatasetSpaceError, open_dataset  # noqa: E402
from engine import OnlineRLContext  # noqa: E402
from engine.config import ConfigError, compile_config  # noqa: E402
from engine.registry import POLICY_REGISTRY  # noqa: E402

CARTPOLE_DQN = "dizoo.classic_control.cartpole.config.cartpole_dqn_config"


def _config(module):
    import importlib

    mod = importlib.import_module(module)
    return copy.deepcopy(mod.main_config), copy.deepcopy(mod.create_config)


def make_checkpoint(path, main, create):
    """An untrained policy's checkpoint, written as the standard pipeline writes them."""
    import gymnasium as gym

    from middleware import CkptSaver
    from pipelines.stages import checkpoint_meta

    cfg = compile_config(main, create, save=False)
    env = gym.make(cfg.env.env_id)
    policy = POLICY_REGISTRY.get(cfg.policy.type)(cfg.policy, env.observation_space, env.action_space)
    CkptSaver(policy.learn_mode, path, meta=checkpoint_meta(cfg)).on_finish(OnlineRLContext())
    return os.path.join(path, "latest.pth.tar")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """``test/short-v0``: 24 CartPole episodes of at most 20 steps, an untrained DQN at eps 0.5."""
    from commands.record import record_dataset

    tmp = tmp_path_factory.mktemp("offline")
    root = str(tmp / "datasets")
    main, create = _config(CARTPOLE_DQN)
    main.env.max_episode_steps = 20
    ckpt = make_checkpoint(str(tmp / "ckpt"), main, create)
    report = record_dataset((main, create), ckpt, 24, "test/short-v0", eps=0.5, seed=1, root=root, num_envs=4)
    return root, ckpt, report, (main, create)


def test_offline_record_keeps_terminated_and_truncated_apart(recorded):
    root, _, report, _ = recorded
    ds = open_dataset("test/short-v0", root)
    assert report["episodes"] == ds.n_episodes == 24 and report["terminated"] + report["truncated"] >= 24
    assert report["terminated"] > 0 and report["truncated"] > 0  # both kinds of ending occur here
    for ep in ds.episodes():
        assert (ep.terminations | ep.truncations).sum() == 1  # only the last step ends the episode ...
        assert ep.terminations[-1] or ep.truncations[-1]
        fell = abs(ep.observations[-1][2]) > 0.2094 or abs(ep.observations[-1][0]) > 2.4
        assert bool(ep.terminations[-1]) == fell  # ... terminated exactly when the pole fell or the cart left
        assert bool(ep.truncations[-1]) == (len(ep) == 20)  # truncated exactly at the time limit (both can hold)


def test_offline_record_is_deterministic(recorded, tmp_path):
    from commands.record import record_dataset

    root, ckpt, report, cfg = recorded
    again = record_dataset(cfg, ckpt, 24, "test/short-v0", eps=0.5, seed=1, root=str(tmp_path), num_envs=4)
    a, b = open_dataset("test/short-v0", root), open_dataset("test/short-v0", str(tmp_path))
    for name in ("obs", "action", "reward", "terminated", "truncated"):
        assert np.array_equal(a.transitions()[name].numpy(), b.transitions()[name].numpy())
    assert again["return_mean"] == report["return_mean"]


def test_offline_record_cli_writes_a_dataset_and_refuses_a_wrong_checkpoint(recorded, tmp_path, capsys):
    from commands.cli import main

    _, ckpt, _, _ = recorded
    config = os.path.join(os.path.dirname(__file__), "..", "..", "dizoo", "classic_control", "cartpole", "config")
    rc = main(["record", "-c", os.path.join(config, "cartpole_dqn_config.py"), "--ckpt", ckpt, "--episodes", "3",
               "--eps", "0.2", "--dataset", "cli/rec-v0", "--root", str(tmp_path), "env.max_episode_steps=15"])
    assert rc == 0 and "recorded cli/rec-v0: 3 episodes" in capsys.readouterr().out
    assert open_dataset("cli/rec-v0", str(tmp_path)).n_episodes == 3
    rc = main(["record", "-c", os.path.join(config, "cartpole_ppo_config.py"), "--ckpt", ckpt, "--episodes", "3",
               "--dataset", "cli/other-v0", "--root", str(tmp_path)])
    assert rc == 2 and "written by policy 'dqn'" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["dizoo.classic_control.cartpole.config.cartpole_bc_config",
                                    "dizoo.classic_control.cartpole.config.cartpole_cql_config"])
def test_offline_pipeline_trains_evaluates_checkpoints_and_logs(recorded, tmp_path, module):
    from pipelines import build_pipeline

    root = recorded[0]
    main, create = _config(module)
    main.dataset.name, main.dataset.root = "test/short-v0", root
    main.log = dict(progress=False)
    main.env.n_evaluator_episode = 2
    main.policy.eval.evaluator.eval_freq = 20
    pipeline = build_pipeline((main, create), max_train_iter=60, exp_name=str(tmp_path / "run"))
    assert pipeline.names == ["preemption", "ddp", "summary", "evaluator", "fetcher", "learner", "checkpoint", "logger",
                              "termination", "final_evaluation"]
    summary = pipeline.run()
    assert summary["stop_reason"] in ("max_train_iter", "stop_value") and summary["train_iter"] >= 20
    assert summary["evaluations"] >= 1 and summary["dataset"] == "test/short-v0"
    assert summary["env_step"] == summary["train_iter"] * main.policy.learn.batch_size  # transitions drawn
    assert summary["shard_transitions"] == open_dataset("test/short-v0", root).total_steps
    assert os.path.isfile(tmp_path / "run" / "ckpt" / "latest.pth.tar")
    assert "eval/episode_return_mean" in (tmp_path / "run" / "progress.csv").read_text()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["train_iter"] == summary["train_iter"]


def test_offline_pipeline_resumes_where_it_stopped(recorded, tmp_path):
    from pipelines import build_pipeline

    main, create = _config("dizoo.classic_control.cartpole.config.cartpole_bc_config")
    main.dataset.name, main.dataset.root = "test/short-v0", recorded[0]
    main.log = dict(progress=False)
    main.env.stop_value = 1e9
    build_pipeline((main, create), max_train_iter=30, exp_name=str(tmp_path / "run")).run()
    pipeline = build_pipeline((main, create), max_train_iter=60, exp_name=str(tmp_path / "run"), resume=True)
    assert pipeline.ctx.train_iter == 30
    assert pipeline.run()["train_iter"] == 60


def test_offline_pipeline_missing_dataset_names_where_it_looked(tmp_path):
    from pipelines import build_pipeline

    main, create = _config("dizoo.classic_control.cartpole.config.cartpole_bc_config")
    main.dataset.name, main.dataset.root = "nowhere/none-v0", str(tmp_path / "empty_root")
    with pytest.raises(DatasetNotFoundError, match="empty_root.*baton record"):
        build_pipeline((main, create), exp_name=str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")  # nothing written before the dataset was found
    main.dataset.name = ""
    with pytest.raises(ConfigError, match="dataset.name is empty"):
        build_pipeline((main, create), exp_name=str(tmp_path / "run"))


def test_offline_pipeline_dataset_of_another_env_is_refused(recorded, tmp_path):
    from pipelines import build_pipeline

    main, create = _config("dizoo.classic_control.cartpole.config.cartpole_bc_config")
    main.dataset.name, main.dataset.root = "test/short-v0", recorded[0]
    create.env.type = "pendulum"
    main.env = {}
    main.env["stop_value"] = -200.0
    with pytest.raises(DatasetSpaceError, match="observation space.*Pendulum-v1"):
        build_pipeline((main, create), exp_name=str(tmp_path / "run"))


def test_offline_record_cli_records_a_dict_observation(tmp_path, capsys, monkeypatch):
    """Issue 31: Taxi-v4's observation is a dict (its state and its mask); ``baton record`` writes it leaf by leaf,
    and the dataset's observation space is the env's dict (tests/data/test_offline_dicts.py trains on one)."""
    from commands.cli import main

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "taxi_config.py"
    config.write_text("main_config = dict(exp_name='taxi', env=dict(env_id='Taxi-v4', collector_env_num=2,\n"
                      "                   evaluator_env_num=1, n_evaluator_episode=1))\n"
                      "create_config = dict(env=dict(type='gym'), policy=dict(type='dqn'))\n")
    assert main(["train", "-c", str(config), "--max-env-step", "200", "--no-progress", "--exp-name", "taxi"]) == 0
    capsys.readouterr()
    assert main(["record", "-c", str(config), "--ckpt", "taxi/ckpt/latest.pth.tar", "--episodes", "2",
                 "--dataset", "test/taxi-v0", "--root", str(tmp_path / "datasets"), "env.max_episode_steps=20"]) == 0
    assert "baton: recorded test/taxi-v0: 2 episodes" in capsys.readouterr().out
    ds = open_dataset("test/taxi-v0", str(tmp_path / "datasets"))
    assert sorted(ds.observation_space.keys()) == ["action_mask", "observation"]
    obs = next(ds.episodes()).observations
    assert obs["action_mask"].dtype == np.int8 and obs["action_mask"].shape == (len(obs["observation"]), 6)
