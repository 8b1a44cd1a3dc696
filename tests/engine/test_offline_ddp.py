"""The offline pipeline with 2 real gloo processes: the same ddp middleware as online, disjoint shards,
identical models, global counters; and more ranks than episodes fails on every rank, naming the cause."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("minari")

import offline_ddp_workers  # noqa: E402
from data.offline import Episode, write_dataset  # noqa: E402
from engine import launch  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]
TIMEOUT = 60


def _cartpole_like(root, name, n_episodes):
    """``n_episodes`` CartPole-shaped episodes of 10 + i steps with random observations and actions."""
    import gymnasium as gym

    rng = np.random.default_rng(0)
    episodes = []
    for i in range(n_episodes):
        steps = 10 + i
        end = np.zeros(steps, bool)
        end[-1] = True
        episodes.append(Episode(rng.standard_normal((steps + 1, 4)).astype(np.float32), rng.integers(0, 2, steps),
                                np.ones(steps, np.float32), end, np.zeros(steps, bool)))
    env = gym.make("CartPole-v1")
    write_dataset(name, episodes, env.observation_space, env.action_space, root=root)


def test_offline_ddp_pipeline_shards_disjoint_models_identical_counters_global(tmp_path):
    root = str(tmp_path / "datasets")
    _cartpole_like(root, "test/ddp-v0", 7)  # uneven: 4 and 3 episodes
    launch(offline_ddp_workers.offline_run, nprocs=2, args=(str(tmp_path), root, "test/ddp-v0"), timeout=TIMEOUT)
    runs = [json.loads((tmp_path / f"offline_rank{r}.json").read_text()) for r in range(2)]
    assert runs[0]["shard"] == [0, 2, 4, 6] and runs[1]["shard"] == [1, 3, 5]
    for key, value in runs[0]["params"].items():  # DDP kept the models identical
        np.testing.assert_allclose(value, runs[1]["params"][key], rtol=0, atol=1e-6)
    s0, s1 = runs[0]["summary"], runs[1]["summary"]
    assert s0["train_iter"] == s1["train_iter"] == 40
    assert s0["env_step"] == s1["env_step"] == 40 * 128 * 2  # transitions drawn, summed over both ranks
    assert s0["shard_transitions"] + s1["shard_transitions"] == s0["dataset_transitions"]
    assert s0["evaluations"] >= 1 and s1["eval_return"] == s0["eval_return"]  # rank 0's evaluation, adopted
    assert os.path.isfile(os.path.join(s0["run_dir"], "ckpt", "latest.pth.tar"))
    assert os.path.isfile(os.path.join(s0["run_dir"], "ckpt", "latest.rank1.pth.tar"))  # rank 1's RNG state


def test_offline_ddp_more_ranks_than_episodes_fails_on_every_rank(tmp_path):
    root = str(tmp_path / "datasets")
    _cartpole_like(root, "test/one-v0", 1)
    with pytest.raises(Exception, match="1 episode.*2 ranks"):
        launch(offline_ddp_workers.offline_run, nprocs=2, args=(str(tmp_path), root, "test/one-v0"), timeout=TIMEOUT)
