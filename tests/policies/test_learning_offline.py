"""Offline learning targets (slow): BC on a CartPole expert dataset reaches >= 475; discrete CQL on a
CartPole medium dataset reaches >= 195 and beats the dataset's own mean return. The datasets are built as
dizoo/classic_control/make_datasets.py builds the reference ones (a PPO teacher trained here), smaller."""
from __future__ import annotations

import copy

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
