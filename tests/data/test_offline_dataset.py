"""Offline datasets: Minari layout round trip, shards of whole episodes, the epoch sampler, bad input."""
from __future__ import annotations

import copy
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("minari")

from data.offline import (DatasetError, DatasetNotFoundError, DatasetSpaceError, EmptyShardError, Episode,  # noqa: E402
                          EpochSampler, ShardPlan, open_dataset, write_dataset)

OBS = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
ACT = gym.spaces.Discrete(3)


def _episodes(n, seed=0):
    """Episode i: i + 2 steps, observations [episode, step], terminated when i is even, else truncated."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        steps = i + 2
        obs = np.stack([np.full(steps + 1, i), np.arange(steps + 1)], axis=1).astype(np.float32)
        end = np.zeros(steps, bool)
        end[-1] = True
        out.append(Episode(obs, rng.integers(0, 3, steps), np.ones(steps, np.float32),
                           end if i % 2 == 0 else np.zeros(steps, bool), np.zeros(steps, bool) if i % 2 == 0 else end))
    return out


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "datasets")


def test_offline_dataset_round_trip_keeps_terminated_and_truncated_apart(root):
    episodes = _episodes(5)
    write_dataset("toy/round-v0", episodes, OBS, ACT, root=root)
    ds = open_dataset("toy/round-v0", root)
    assert ds.n_episodes == 5 and ds.total_steps == sum(len(e) for e in episodes)
    read = list(ds.episodes())
    for ep, back in zip(episodes, read):
        np.testing.assert_array_equal(ep.observations, back.observations)
        np.testing.assert_array_equal(ep.actions, back.actions)
        np.testing.assert_array_equal(ep.terminations, back.terminations)
        np.testing.assert_array_equal(ep.truncations, back.truncations)
    tr = ds.transitions([1, 2])
    assert tr["obs"][:, 0].tolist() == [1.0] * 3 + [2.0] * 4
    np.testing.assert_array_equal(tr["next_obs"][:, 1], tr["obs"][:, 1] + 1)  # next_obs follows obs in its episode
    assert tr["truncated"].tolist() == [False, False, True] + [False] * 4
    assert tr["terminated"].tolist() == [False] * 3 + [False, False, False, True]
    assert tr["action"].dtype == torch.int64 and tr["obs"].dtype == torch.float32


def test_offline_dataset_is_readable_by_minari_itself(root, monkeypatch):
    import minari

    write_dataset("toy/minari-v0", _episodes(3), OBS, ACT, root=root)
    monkeypatch.setenv("MINARI_DATASETS_PATH", root)
    ds = minari.load_dataset("toy/minari-v0")
    assert ds.total_episodes == 3 and "toy/minari-v0" in minari.list_local_datasets()
    ep = ds[2]
    assert ep.observations.shape == (5, 2) and bool(ep.terminations[-1]) and not ep.truncations.any()


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("n_episodes", [7, 9, 30])
def test_offline_shards_are_disjoint_and_cover_the_dataset(root, world_size, n_episodes):
    write_dataset(f"toy/shard{n_episodes}-v0", _episodes(n_episodes), OBS, ACT, root=root)
    ds = open_dataset(f"toy/shard{n_episodes}-v0", root)
    plan = ShardPlan(ds.n_episodes, world_size)
    shards = [plan.episodes(r) for r in range(world_size)]
    everything = np.concatenate(shards)
    assert sorted(everything.tolist()) == list(range(n_episodes))  # the union is the dataset, no overlap
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    # the transitions of the shards are exactly the dataset's, each once
    rows = [tuple(r) for s in shards for r in ds.transitions(s)["obs"].tolist()]
    assert sorted(rows) == sorted(tuple(r) for r in ds.transitions()["obs"].tolist())
    assert ShardPlan(n_episodes, world_size).episodes(1).tolist() == shards[1].tolist()  # deterministic
    text = plan.describe(0, ds.episode_lengths)
    assert ("uneven" in text) == (len({int(ds.episode_lengths[s].sum()) for s in shards}) > 1 or
                                  n_episodes % world_size != 0)


def test_offline_more_ranks_than_episodes_is_an_error_naming_both(root):
    with pytest.raises(EmptyShardError, match="2 episode.*3 ranks"):
        ShardPlan(2, 3)


def test_offline_epoch_sampler_visits_every_row_once_per_pass_and_reshuffles():
    sampler = EpochSampler(seed=3)
    first = torch.cat([sampler.sample(10, 4)[0] for _ in range(5)])  # 20 rows: two passes
    assert sorted(first[:10].tolist()) == list(range(10)) and sorted(first[10:].tolist()) == list(range(10))
    assert first[:10].tolist() != first[10:].tolist() and sampler.epoch == 2
    again = EpochSampler(seed=3)
    again.seek(12)  # a resume continues the same order
    assert again.sample(10, 8)[0].tolist() == first[12:20].tolist()


def test_offline_missing_dataset_names_path_root_and_how_to_make_it(root):
    write_dataset("toy/present-v0", _episodes(2), OBS, ACT, root=root)
    with pytest.raises(DatasetNotFoundError) as err:
        open_dataset("toy/absent-v0", root)
    message = str(err.value)
    assert os.path.join(root, "toy", "absent-v0", "data") in message and "toy/present-v0" in message
    assert "baton record" in message and "make_datasets.py" in message


def test_offline_dataset_whose_spaces_do_not_match_the_env(root):
    write_dataset("toy/spaces-v0", _episodes(2), OBS, ACT, root=root)
    ds = open_dataset("toy/spaces-v0", root)
    ds.check_spaces(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3), "env X")  # bounds may differ
    with pytest.raises(DatasetSpaceError, match="observation space.*env 'CartPole-v1'"):
        ds.check_spaces(gym.spaces.Box(-1, 1, (4,), np.float32), ACT, "env 'CartPole-v1'")
    with pytest.raises(DatasetSpaceError, match="action space"):
        ds.check_spaces(OBS, gym.spaces.Discrete(2), "env X")


def test_offline_truncated_dataset_file_is_an_error_naming_the_file(root):
    path = write_dataset("toy/cut-v0", _episodes(6), OBS, ACT, root=root)
    hdf5 = os.path.join(path, "main_data.hdf5")
    size = os.path.getsize(hdf5)
    with open(hdf5, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(DatasetError, match="main_data.hdf5 is corrupt or truncated"):
        open_dataset("toy/cut-v0", root).transitions()


def test_offline_writing_an_existing_name_is_refused(root):
    write_dataset("toy/twice-v0", _episodes(2), OBS, ACT, root=root)
    with pytest.raises(DatasetError, match="exists already"):
        write_dataset("toy/twice-v0", _episodes(2), OBS, ACT, root=root)
    write_dataset("toy/twice-v0", _episodes(3), OBS, ACT, root=root, overwrite=True)
    assert open_dataset("toy/twice-v0", root).n_episodes == 3


def test_the_replicated_split_gives_every_rank_the_whole_dataset():
    """ReAgent's other split (``dataset.split=replicate``): all episodes on every rank, each rank drawing them
    in its own order (its epoch sampler is seeded per rank); more ranks than episodes is then no error."""
    from data.offline.shard import ShardPlan

    plan = ShardPlan(n_episodes=3, world_size=4, split="replicate")
    assert [plan.episodes(r).tolist() for r in range(4)] == [[0, 1, 2]] * 4 and plan.even
    assert "every rank holds them all" in plan.describe(1, [10, 20, 30])
    with pytest.raises(ValueError, match="dataset.split='replica' is not one of 'shard', 'replicate'"):
        ShardPlan(3, 2, split="replica")


def test_the_split_is_a_checked_config_key():
    from engine.config import ConfigError, compile_config

    from dizoo.classic_control.cartpole.config.cartpole_bc_config import create_config, main_config
    main = copy.deepcopy(main_config)
    main.dataset.split = "replicated"
    with pytest.raises(ConfigError, match="dataset.split='replicated' is not one of 'shard', 'replicate' \\(did you "
                                          "mean 'replicate'\\?\\)"):
        compile_config(main, create_config, save=False)
