"""Hindsight experience replay (``data.replay.her``, issue 31 item 4): episodes found from the collector's layout,
goals relabelled by strategy with the env's own reward and termination, checkpoints, and the refusals."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from data.replay import HerParams, HindsightStorage, ReplayBuffer, UniformSampler
from data.replay.her import goal_functions
from dizoo.goal.envs import BitFlippingEnv
from engine.config import ConfigError

ENVS, BITS = 2, 3


def _reward(achieved, desired, info):
    return -(np.asarray(achieved) != np.asarray(desired)).any(-1).astype(np.float32)


def _push(storage, steps, ends):
    """``steps`` vector steps of ``ENVS`` envs. ``achieved_goal`` of ``next_obs`` is the stream row it was written
    at (so a relabelled goal names the row it came from); ``ends``: the (step, env) pairs that end an episode."""
    first = storage._rows
    rows = torch.arange(first, first + steps * ENVS, dtype=torch.float32)
    goal = torch.full((len(rows), BITS), -1.0)
    done = torch.zeros(len(rows), dtype=torch.bool)
    for t, e in ends:
        done[t * ENVS + e] = True
    obs = {"observation": rows[:, None].repeat(1, BITS), "achieved_goal": rows[:, None].repeat(1, BITS) - 0.5,
           "desired_goal": goal}
    next_obs = {"observation": rows[:, None].repeat(1, BITS), "achieved_goal": rows[:, None].repeat(1, BITS),
                "desired_goal": goal.clone()}
    from data.batch import make_batch
    storage.extend(make_batch(dict(obs=obs, next_obs=next_obs, action=torch.zeros(len(rows), dtype=torch.long),
                                   reward=torch.full((len(rows),), -1.0), terminated=done,
                                   truncated=torch.zeros(len(rows), dtype=torch.bool))))


def _storage(strategy="future", k=4, capacity=64, terminated=None, seed=0):
    return HindsightStorage(capacity, ENVS, _reward, strategy=strategy, k=k, compute_terminated=terminated, seed=seed)


def _relabelled(storage, idx):
    """(sampled row, row its goal came from) for each relabelled transition of one gather."""
    data = storage.gather(idx)
    goal = data["next_obs"]["desired_goal"][:, 0]
    rows = data["next_obs"]["observation"][:, 0]
    keep = goal >= 0
    assert torch.equal(data["obs"]["desired_goal"][keep], data["next_obs"]["desired_goal"][keep])
    return rows[keep].long().tolist(), goal[keep].long().tolist(), data


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_relabelled_goals_come_from_the_same_episode_by_strategy(strategy):
    storage = _storage(strategy)
    # env 0: an episode of steps 0..3 (rows 0, 2, 4, 6); env 1: of steps 0..1 (rows 1, 3), then one still running
    _push(storage, 2, ends=[(1, 1)])
    _push(storage, 3, ends=[(1, 0)])  # step 3 of env 0 is the push's step 1
    episode = {0: [0, 2, 4, 6], 2: [0, 2, 4, 6], 4: [0, 2, 4, 6], 6: [0, 2, 4, 6], 1: [1, 3], 3: [1, 3]}
    seen = set()
    for _ in range(20):
        rows, goals, _ = _relabelled(storage, torch.arange(len(storage)))
        for row, goal in zip(rows, goals):
            assert row in episode, f"row {row} of a running episode was relabelled"
            rows_of_episode = episode[row]
            if strategy == "future":
                assert goal in rows_of_episode and goal >= row
            elif strategy == "final":
                assert goal == rows_of_episode[-1]
            else:
                assert goal in rows_of_episode
            seen.add((row, goal))
    if strategy == "episode":
        assert (6, 0) in seen  # an earlier step's goal too
    if strategy == "future":
        assert (0, 0) in seen and (0, 6) in seen  # its own next goal and the last one


def test_the_share_relabelled_is_k_over_k_plus_one_and_the_reward_is_the_envs():
    storage = _storage(k=4, capacity=4096)
    for _ in range(10):
        _push(storage, 8, ends=[(7, 0), (7, 1)])  # whole 8-step episodes
    shares = [len(_relabelled(storage, torch.arange(len(storage)))[0]) / len(storage) for _ in range(20)]
    assert abs(np.mean(shares) - 0.8) < 0.03  # 3,200 draws: the mean's deviation is about 0.007
    rows, goals, data = _relabelled(storage, torch.arange(len(storage)))
    relabelled = data["next_obs"]["desired_goal"][:, 0] >= 0
    met = relabelled & (data["next_obs"]["desired_goal"][:, 0] == data["next_obs"]["achieved_goal"][:, 0])
    assert met.any() and (data["reward"][met] == 0).all()
    assert (data["reward"][relabelled & ~met] == -1).all() and (data["reward"][~relabelled] == -1).all()


def test_compute_terminated_ends_a_relabelled_transition_that_meets_its_goal():
    terminated = lambda a, d, info: (np.asarray(a) == np.asarray(d)).all(-1)  # noqa: E731
    storage = _storage("final", k=1_000_000, terminated=terminated)
    _push(storage, 4, ends=[(3, 0), (3, 1)])
    data = storage.gather(torch.arange(len(storage)))
    last = data["next_obs"]["observation"][:, 0] >= 6  # the last step: its own achieved goal is the final one
    assert data["terminated"][last].all() and not data["terminated"][~last].any()


def test_overwritten_steps_are_never_goals_and_ring_wrap_keeps_episodes():
    storage = _storage("episode", capacity=9)  # odd: an overwritten row's slot holds the other env's row
    _push(storage, 4, ends=[])
    _push(storage, 4, ends=[(3, 0), (3, 1)])  # episodes of 8 steps (16 rows), the ring keeps the last 9
    oldest = storage._rows - storage.capacity
    for _ in range(20):
        rows, goals, _ = _relabelled(storage, torch.arange(len(storage)))
        assert rows and all(goal >= oldest and goal % ENVS == row % ENVS for row, goal in zip(rows, goals))


def test_a_push_that_is_not_whole_vector_steps_is_refused():
    storage = _storage()
    with pytest.raises(ValueError, match="whole vector steps of 2 envs.*nstep=1"):
        from data.batch import make_batch
        storage.extend(make_batch(dict(reward=torch.zeros(3), terminated=torch.zeros(3, dtype=torch.bool),
                                       truncated=torch.zeros(3, dtype=torch.bool))))


def test_checkpoint_keeps_the_episodes_and_the_draws():
    storage = _storage(capacity=32, seed=3)
    _push(storage, 6, ends=[(5, 0), (2, 1)])
    state = copy.deepcopy(storage.state_dict())
    torch.save(state, "/dev/null")  # plain tensors and ints: loads with weights_only
    restored = _storage(capacity=32, seed=99)
    restored.load_state_dict(state)
    a, b = storage.gather(torch.arange(12)), restored.gather(torch.arange(12))
    assert torch.equal(a["next_obs"]["desired_goal"], b["next_obs"]["desired_goal"])
    with pytest.raises(ValueError, match="same env.collector_env_num"):
        HindsightStorage(32, 3, _reward).load_state_dict(state)


def test_a_hindsight_replay_cannot_be_resharded():
    buffer = ReplayBuffer(16, UniformSampler(), _storage(capacity=16))
    _push(buffer.storage, 2, ends=[])
    with pytest.raises(TypeError, match="env layout"):
        buffer.transitions()


def test_goal_functions_name_what_a_non_goal_env_lacks():
    her = HerParams(strategy="future")
    reward, terminated = goal_functions(BitFlippingEnv(4), her)
    assert callable(reward) and callable(terminated)
    with pytest.raises(ConfigError, match="keys 'achieved_goal' and 'desired_goal'.*CartPole-v1.*her.achieved_goal"):
        goal_functions(gym.make("CartPole-v1"), her)

    class NoReward(BitFlippingEnv):
        compute_reward = None

    with pytest.raises(ConfigError, match="compute_reward.*NoReward \\(and its wrappers\\) does not define"):
        goal_functions(NoReward(4), her)

    class OwnReward(gym.Wrapper):  # a wrapper's compute_reward is the one for the goals it observes
        def compute_reward(self, achieved, desired, info):
            return np.zeros(len(achieved))

    reward, _ = goal_functions(OwnReward(BitFlippingEnv(4)), her)
    assert reward.__self__.__class__ is OwnReward


def test_a_goal_function_that_answers_one_value_for_a_batch_is_called_row_by_row():
    """gymnasium-robotics' Maze computes its termination as one norm over the whole batch: each relabelled row
    still gets its own."""
    def whole_batch(achieved, desired, info):  # one bool for any input, true only where all rows match
        return bool(np.linalg.norm(np.asarray(achieved) - np.asarray(desired)) == 0)

    storage = _storage("final", k=1_000_000, terminated=whole_batch)
    _push(storage, 4, ends=[(3, 0), (3, 1)])
    data = storage.gather(torch.arange(len(storage)))
    last = data["next_obs"]["observation"][:, 0] >= 6
    assert data["terminated"][last].all() and not data["terminated"][~last].any()


def test_a_collect_larger_than_the_replay_names_both_settings():
    storage = _storage(capacity=6)
    with pytest.raises(ValueError, match="collect of 8 transitions.*replay_buffer_size=6.*>= 8"):
        _push(storage, 4, ends=[])
