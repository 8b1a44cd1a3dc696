"""Offline learning targets (slow): BC on a CartPole expert dataset reaches >= 475; discrete CQL on a
CartPole medium dataset reaches >= 195 and beats the dataset's own mean return; TD3+BC on the Pendulum
medium dataset reaches >= -250. The datasets are built as dizoo/classic_control/make_datasets.py builds the
reference ones (the teachers trained here), the CartPole ones smaller."""
from __future__ import annotations

import copy
import os

import pytest

pytest.importorskip("minari")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    from dizoo.classic_control.make_datasets import make

    tmp = tmp_path_factory.mktemp("offline_learning")
    root = str(tmp / "datasets")
    reports = make(root, str(tmp / "work"), seed=0, only="cartpole",
                   episodes={"cartpole/expert-v0": 20, "cartpole/medium-v0": 60})
    return root, reports


@pytest.fixture(scope="module")
def pendulum_dataset(tmp_path_factory):
    """``pendulum/medium-v0`` as the reference one (100 episodes; recording them costs about a second)."""
    from dizoo.classic_control.make_datasets import make

    tmp = tmp_path_factory.mktemp("offline_pendulum")
    root = str(tmp / "datasets")
    return root, make(root, str(tmp / "work"), seed=0, only="pendulum")


def _train(module, root, tmp_path, max_train_iter):
    import importlib

    from pipelines import serial_pipeline

    mod = importlib.import_module(module)
    main = copy.deepcopy(mod.main_config)
    main.dataset.root = root
    main.log = dict(progress=False)
    main.env.n_evaluator_episode = 10
    return serial_pipeline((main, copy.deepcopy(mod.create_config)), max_train_iter=max_train_iter,
                           exp_name=str(tmp_path / "run"))


def test_offline_bc_on_cartpole_expert_reaches_475(datasets, tmp_path):
    root, reports = datasets
    assert reports["cartpole/expert-v0"]["return_mean"] >= 475
    summary = _train("dizoo.classic_control.cartpole.config.cartpole_bc_config", root, tmp_path, 3000)
    assert summary["best_eval_return"] >= 475, summary


def test_offline_cql_on_cartpole_medium_beats_195_and_the_dataset(datasets, tmp_path):
    root, reports = datasets
    dataset_mean = reports["cartpole/medium-v0"]["return_mean"]
    assert dataset_mean < 195  # a medium dataset: cloning its average would not do
    summary = _train("dizoo.classic_control.cartpole.config.cartpole_cql_config", root, tmp_path, 4000)
    assert summary["best_eval_return"] >= 195 and summary["best_eval_return"] > dataset_mean, summary


def test_offline_td3bc_on_pendulum_medium_reaches_minus_250_and_beats_the_dataset(pendulum_dataset, tmp_path):
    """The issue's target, the best 10-episode evaluation >= -250; and, since each evaluation starts from new
    states (a lucky set can carry the best one), the policy it saved also beats the dataset's mean over 50
    episodes from starts no evaluation used: by 299 with seed 0 here (299 to 423 with seeds 0 to 3, each on the
    dataset of its seed), asserted with a margin of 100."""
    # dataset creation, training and the 50 episodes together: about 10 s on the idle 2-core machine
    root, reports = pendulum_dataset
    dataset_mean = reports["pendulum/medium-v0"]["return_mean"]
    assert dataset_mean < -500  # medium: cloning its average would not do
    module = "dizoo.classic_control.pendulum.config.pendulum_td3bc_config"
    summary = _train(module, root, tmp_path, 4000)
    assert summary["best_eval_return"] >= -250, summary
    assert _mean_return(module, summary["run_dir"], n_episode=50, seed=777) > dataset_mean + 100


def _mean_return(module, run_dir, n_episode, seed):
    """The mean return of the best checkpoint of a run of config ``module`` over ``n_episode`` greedy
    episodes, env i of 25 reset with ``seed + i``."""
    import importlib

    import numpy as np

    from data.env_loop import EnvLoop
    from data.envs import make_vector_env
    from engine.config import compile_config
    from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
    from middleware.checkpoint import load_checkpoint
    from middleware.evaluator import evaluate_episodes

    mod = importlib.import_module(module)
    cfg = compile_config(mod.main_config, mod.create_config, save=False)
    env = make_vector_env(ENV_REGISTRY.get(cfg.env.type), cfg.env, 25, seed, manager="sync", training=False)
    try:
        policy = POLICY_REGISTRY.get(cfg.policy.type)(cfg.policy, env.single_observation_space,
                                                      env.single_action_space)
        policy.learn_mode.load_state_dict(load_checkpoint(os.path.join(run_dir, "ckpt", "best.pth.tar"))["policy"])
        return float(np.mean(evaluate_episodes(EnvLoop(policy.eval_mode, env, seed), n_episode, seed)["returns"]))
    finally:
        env.close()
