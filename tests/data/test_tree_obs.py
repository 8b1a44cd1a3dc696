"""Dictionary observations (gymnasium Dict, nested Dict, Tuple) through the data layer as DI-treetensor trees:
the env loop (sync and async vector envs, env groups, real final observations), n-step windows, recurrent
sequences, replay (uniform and prioritized, host and device paths, dtypes kept), checkpoints that load with
``torch.load(weights_only=True)``, resharding and memory estimates that count every leaf.

The env's observations say which step they are: ``image`` (uint8) is ``10 * episode + t`` (episodes counted
mod 20), ``vec`` is ``t / 10`` (float32), ``dir`` is ``t % 4`` (Discrete: int64), so every check reads a
transition's step from each leaf and a leaf gathered from the wrong slot shows.
"""
from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from data.batch import make_batch, ttorch
from data.env_loop import EnvLoop
from data.envs import GymEnvType, make_vector_env
from data.nstep import NStepBuilder
from data.obs import (all_finite, cat, from_plain, is_tree, leaves, nbytes, num_rows, replace_rows, space_nbytes,
                      stack, to_device, to_plain, to_tensor)
from data.replay import FrameStackStorage, PrioritizedSampler, ReplayBuffer, RingStorage, ReplayMemoryError
from data.replay import device as placement
from data.replay.reshard import load_shards, shard_plan
from data.sequences import to_sequences
from engine import OnlineRLContext
from middleware import StepCollector
from middleware.collector import NonFiniteDataError, _check_collect_memory, _check_finite_obs

IMAGE = spaces.Box(0, 255, (3, 5, 5), np.uint8)
VEC = spaces.Box(-1, 1, (4,), np.float32)
#: bytes of one observation: image 75 (uint8), vec 16 (float32), dir 8 (Discrete batches as int64)
OBS_BYTES = 75 + 16 + 8


class DictObsEnv(gym.Env):
    """A Dict observation that counts steps (module docstring); ``nested``: ``{"image", "nav": {"vec", "dir"},
    "pair": Tuple(Discrete, Box)}``. Terminates at step ``terminate_at`` (None: never; truncation comes from
    gymnasium's TimeLimit)."""

    def __init__(self, terminate_at=None, nested=False):
        self.nested, self.terminate_at = nested, terminate_at
        if nested:
            self.observation_space = spaces.Dict({
                "image": IMAGE, "nav": spaces.Dict({"vec": VEC, "dir": spaces.Discrete(4)}),
                "pair": spaces.Tuple((spaces.Discrete(3), spaces.Box(0, 1, (2,), np.float32)))})
        else:
            self.observation_space = spaces.Dict({"image": IMAGE, "vec": VEC, "dir": spaces.Discrete(4)})
        self.action_space = spaces.Discrete(2)
        self._t, self._episode = 0, -1

    def _obs(self):
        image = np.full((3, 5, 5), 10 * (self._episode % 20) + self._t, np.uint8)
        vec, direction = np.full(4, self._t / 10, np.float32), self._t % 4
        if self.nested:
            return {"image": image, "nav": {"vec": vec, "dir": direction},
                    "pair": (self._t % 3, np.full(2, self._t / 10, np.float32))}
        return {"image": image, "vec": vec, "dir": direction}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t, self._episode = 0, self._episode + 1
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        terminated = self.terminate_at is not None and self._t >= self.terminate_at
        return self._obs(), 1.0, terminated, False, {}


if "BatonDictObs-v0" not in gym.registry:
    gym.register("BatonDictObs-v0", entry_point=DictObsEnv)
ENV_TYPE = GymEnvType("BatonDictObs-v0", stop_value=1e9, max_episode_steps=5)


def _env(num_envs=2, manager="sync", shared_memory=False, groups=None, **env_kwargs):
    env_cfg = dict(ENV_TYPE.default_config(), env_kwargs=env_kwargs,
                   manager=dict(type=manager, shared_memory=shared_memory, context="fork"))
    return make_vector_env(ENV_TYPE, env_cfg, num_envs, seed=0, groups=groups)


class Zero:
    """Action 0 for every env; keeps what it saw."""

    def __init__(self):
        self.seen = []

    def forward(self, obs, **kwargs):
        self.seen.append(obs)
        return {"action": torch.zeros(num_rows(obs), dtype=torch.long)}


def _t(obs):
    """The step within its episode each row of a (flat-keyed) observation says, from the image leaf."""
    return obs.image[:, 0, 0, 0].long() % 10


# ---- data.obs ---------------------------------------------------------------------------------------------
def test_to_tensor_makes_trees_that_share_memory_and_flat_arrays_stay_tensors():
    image, vec = np.zeros((2, 3, 5, 5), np.uint8), np.zeros((2, 4), np.float32)
    tree = to_tensor({"image": image, "nav": {"vec": vec}, "pair": (np.arange(2), np.ones((2, 2), np.float32))})
    assert is_tree(tree) and isinstance(tree, ttorch.Tensor)
    assert [(path, leaf.dtype) for path, leaf in leaves(tree)] == [
        (("image",), torch.uint8), (("nav", "vec"), torch.float32), (("pair", "0"), torch.int64),
        (("pair", "1"), torch.float32)]
    image[1] = 7  # no copy: the tree's leaves are the env's arrays
    assert tree.image[1].eq(7).all() and tree.pair["0"].tolist() == [0, 1]
    flat = to_tensor(vec)
    assert type(flat) is torch.Tensor and not is_tree(flat)



def test_to_device_takes_an_env_s_own_dict_observation_as_a_tree():
    """A policy called by hand on a gymnasium vector env's dict of arrays (or on dicts of tensors) gets a tree."""
    obs = {"image": np.zeros((2, 3, 5, 5), np.uint8), "nav": {"vec": torch.ones(2, 4)}, "pair": (np.arange(2),)}
    tree = to_device(obs, torch.device("cpu"))
    assert is_tree(tree) and [(path, leaf.dtype) for path, leaf in leaves(tree)] == [
        (("image",), torch.uint8), (("nav", "vec"), torch.float32), (("pair", "0"), torch.int64)]

def test_replace_rows_puts_final_dicts_into_every_leaf_and_keeps_the_input():
    obs = {"image": np.zeros((3, 2), np.uint8), "nav": {"dir": np.zeros(3, np.int64)}, "pair": (np.zeros(3),)}
    finals = [{"image": np.full(2, 9, np.uint8), "nav": {"dir": 3}, "pair": (5.0,)}]
    out = to_tensor(replace_rows(obs, [1], finals))
    assert out.image.tolist() == [[0, 0], [9, 9], [0, 0]] and out.nav.dir.tolist() == [0, 3, 0]
    assert out.pair["0"].tolist() == [0.0, 5.0, 0.0] and out.image.dtype == torch.uint8
    assert obs["image"].sum() == 0 and obs["nav"]["dir"].sum() == 0  # a copy was changed


def test_all_finite_reads_every_value_and_every_float_kind():
    finite = torch.ones(3)
    assert all_finite(finite, torch.zeros(2, 2), torch.arange(3)) is True
    for bad in (float("nan"), float("inf"), -float("inf")):
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):  # bfloat16: numpy has none
            value = torch.zeros(4, dtype=dtype)
            value[2] = bad
            assert all_finite(finite, value) is False, (bad, dtype)
    grad = torch.zeros(2, requires_grad=True)
    assert all_finite(grad) is True and all_finite(grad * float("nan")) is False
    assert all_finite(torch._neg_view(torch.tensor([1.0, float("inf")]))) is False  # a lazily negated view


def test_all_finite_reads_a_device_s_values_back_once(monkeypatch):
    """Off the host (CPU tensors standing for a device's here) every value's check is one reduction, read once."""
    import data.replay.device

    monkeypatch.setattr(data.replay.device, "host_path", lambda device: False)
    reads = []
    original = torch.Tensor.__bool__
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda self: reads.append(1) or original(self))
    monkeypatch.setattr(torch.Tensor, "numpy", lambda self, **kw: pytest.fail("a device value read through numpy"))
    assert all_finite(torch.ones(3), torch.zeros(2, 2), to_tensor({"v": np.zeros(2, np.float32)})) is True
    bad = torch.ones(3)
    bad[1] = float("nan")
    assert all_finite(torch.ones(3), bad) is False and len(reads) == 2


def test_all_finite_stack_cat_and_plain_dicts_on_trees():
    tree = to_tensor({"image": np.zeros((2, 3), np.uint8), "vec": np.zeros((2, 4), np.float32)})
    assert all_finite(tree) is True
    tree.vec[1, 2] = float("nan")
    assert all_finite(tree) is False and all_finite(torch.zeros(2), tree) is False
    assert all_finite(to_tensor({"dir": np.zeros(2, np.int64)})) is True  # no float leaf: finite
    assert stack([tree, tree]).image.shape == (2, 2, 3) and cat([tree, tree]).vec.shape == (4, 4)
    plain = to_plain(tree)
    assert type(plain) is dict and set(plain) == {"image", "vec"} and type(plain["image"]) is torch.Tensor
    back = from_plain(plain)
    assert is_tree(back) and back.image.dtype == torch.uint8 and torch.equal(back.image, tree.image)
    assert nbytes(tree) == 2 * 3 + 2 * 4 * 4


def test_space_nbytes_counts_every_leaf():
    assert space_nbytes(DictObsEnv().observation_space) == OBS_BYTES
    assert space_nbytes(DictObsEnv(nested=True).observation_space) == OBS_BYTES + 8 + 8  # Tuple: Discrete + 2 float32
    assert space_nbytes(VEC) == 16


# ---- the env loop -------------------------------------------------------------------------------------------
MANAGERS = [("sync", False, None), ("async", False, None), ("async", True, None), ("sync", False, 2)]
MANAGER_IDS = ["sync", "async-pipes", "async-shared-memory", "sync-groups"]


@pytest.mark.parametrize("manager,shared_memory,groups", MANAGERS, ids=MANAGER_IDS)
def test_env_loop_carries_tree_obs_with_real_final_observations(manager, shared_memory, groups):
    env = _env(3, manager, shared_memory, groups, terminate_at=3)
    policy = Zero()
    loop = EnvLoop(policy, env, seed=0)
    try:
        steps = [loop.step() for _ in range(4)]
    finally:
        env.close()
    assert is_tree(policy.seen[0]) and is_tree(loop.obs)
    assert (policy.seen[0].image.dtype, policy.seen[0].vec.dtype, policy.seen[0].dir.dtype) == (
        torch.uint8, torch.float32, torch.int64)
    assert loop.obs.image.shape == (3, 3, 5, 5)  # env groups' rows joined (the policy saw each group's)
    ended = steps[2]
    assert ended.ended_envs() == [0, 1, 2] and ended.terminated.all()
    # the real final observation in every leaf, while the envs (and the loop's obs) already restarted
    assert _t(ended.next_obs).tolist() == [3, 3, 3] and ended.next_obs.dir.tolist() == [3, 3, 3]
    assert torch.allclose(ended.next_obs.vec, torch.full((3, 4), 0.3))
    assert (ended.next_obs.image[:, 0, 0, 0] // 10).tolist() == (ended.obs.image[:, 0, 0, 0] // 10).tolist()
    assert _t(steps[3].obs).tolist() == [0, 0, 0] and steps[3].obs.dir.tolist() == [0, 0, 0]
    assert (steps[3].obs.image // 10 == ended.obs.image // 10 + 1).all()  # the next episode's first observation
    for step in steps:  # every non-final step: next_obs is one step after obs, in every leaf
        live = ~step.ended
        assert (_t(step.next_obs)[live] == _t(step.obs)[live] + 1).all()
        assert (step.next_obs.dir[live] == (step.obs.dir[live] + 1) % 4).all()


def test_env_loop_nested_dict_and_tuple_obs_with_truncation():
    env = _env(2, nested=True)  # truncated by the TimeLimit after 5 steps
    loop = EnvLoop(Zero(), env, seed=0)
    steps = [loop.step() for _ in range(5)]
    last = steps[4]
    assert last.truncated.all() and not last.terminated.any()
    assert last.next_obs.nav.dir.tolist() == [1, 1] and last.next_obs.pair["0"].tolist() == [2, 2]  # 5 % 4, 5 % 3
    assert torch.allclose(last.next_obs.pair["1"], torch.full((2, 2), 0.5))
    assert loop.obs.nav.dir.tolist() == [0, 0] and loop.obs.pair["0"].tolist() == [0, 0]
    assert last.next_obs.nav.vec.dtype == torch.float32 and last.next_obs.image.dtype == torch.uint8


def _chunk(steps):
    """A collector's [T, E] chunk of loop steps."""
    return {"obs": stack([s.obs for s in steps]), "action": torch.stack([s.action for s in steps]),
            "reward": torch.stack([s.reward for s in steps]).float(), "next_obs": stack([s.next_obs for s in steps]),
            "terminated": torch.stack([s.terminated for s in steps]),
            "truncated": torch.stack([s.truncated for s in steps])}


def _collect_nstep(nstep=3, calls=3, steps_per_call=4, num_envs=2, **env_kwargs):
    loop = EnvLoop(Zero(), _env(num_envs, **env_kwargs), seed=0)
    builder = NStepBuilder(nstep, gamma=0.5)
    return [builder.push(_chunk(list(loop.run(steps_per_call)))) for _ in range(calls)]


def test_nstep_windows_carry_every_leaf_across_calls_and_episode_ends():
    pushes = _collect_nstep(terminate_at=4)
    total = sum(num_rows(p["obs"]) for p in pushes if p)
    assert total == 2 * (12 - 2)  # 12 steps an env, the last 2 still waiting for their windows
    for out in pushes:
        assert is_tree(out["obs"]) and is_tree(out["next_obs"]) and out["next_obs"].image.dtype == torch.uint8
        span = out["span"].long()
        # next_obs is `span` steps after obs in the same episode, in every leaf (the final one at an end)
        assert (_t(out["next_obs"]) == _t(out["obs"]) + span).all()
        assert (out["next_obs"].image // 10 == out["obs"].image // 10).all()
        assert (out["next_obs"].dir == (out["obs"].dir + span) % 4).all()
        assert torch.allclose(out["next_obs"].vec[:, 0], _t(out["next_obs"]).float() / 10)
        assert (out["terminated"] == (_t(out["next_obs"]) == 4)).all()
    assert any(out["terminated"].any() for out in pushes) and any((out["span"] < 3).any() for out in pushes)


def test_step_collector_gives_tree_transitions_and_counts_every_leaf_for_its_memory_check(monkeypatch):
    import middleware.collector as collector_module

    ctx = OnlineRLContext()
    StepCollector(Zero(), _env(2, terminate_at=3), n_sample=8, nstep=2, gamma=0.9)(ctx)
    tr = ctx.trajectories
    assert is_tree(tr.obs) and tr.obs.image.dtype == torch.uint8 and num_rows(tr.obs) == len(tr.reward) == 6
    assert (_t(tr.next_obs) == _t(tr.obs) + tr.span.long()).all()
    # one collect of 2 envs x 4 steps holds 2 * OBS_BYTES * 2 * (2 * 4 + 1) bytes (data.nstep.collect_bytes)
    needed = 2 * OBS_BYTES * 2 * (2 * 4 + 1)
    monkeypatch.setattr(collector_module, "host_memory_bytes", lambda: needed)
    _check_collect_memory(_env(2), 2, 8, 2)
    monkeypatch.setattr(collector_module, "host_memory_bytes", lambda: needed - 1)
    with pytest.raises(Exception, match=f"{OBS_BYTES} bytes an observation"):
        _check_collect_memory(_env(2), 2, 8, 2)


def test_non_finite_leaf_is_named_by_its_key():
    obs = to_tensor({"image": np.zeros((1, 2, 3), np.uint8), "vec": np.zeros((1, 2, 4), np.float32)})
    next_obs = to_tensor({"image": np.zeros((1, 2, 3), np.uint8), "vec": np.zeros((1, 2, 4), np.float32)})
    next_obs.vec[0, 1, 2] = float("inf")
    with pytest.raises(NonFiniteDataError, match=r"env 1 returned a non-finite next observation \['vec'\] \(inf "
                                                 r"at element \[2\]"):
        _check_finite_obs(obs, next_obs, torch.zeros(1, 2))


# ---- sequences ----------------------------------------------------------------------------------------------
def test_sequences_cut_every_leaf_like_a_tensor():
    steps, envs = 4, 2
    image = torch.arange(steps * envs * 3, dtype=torch.uint8).reshape(steps, envs, 3)
    vec = torch.arange(steps * envs, dtype=torch.float32).reshape(steps, envs)
    done = torch.zeros(steps, envs, dtype=torch.bool)
    common = {"terminated": done, "truncated": done, "state": torch.zeros(steps, envs, 1)}
    tree = to_sequences({"obs": make_batch({"image": image, "nest": {"vec": vec}}), **common}, seq_len=2)
    assert is_tree(tree["obs"]) and tree["obs"].image.dtype == torch.uint8
    assert torch.equal(tree["obs"].image, to_sequences({"obs": image, **common}, 2)["obs"])
    assert torch.equal(tree["obs"].nest.vec, to_sequences({"obs": vec, **common}, 2)["obs"])
    assert tree["obs"].nest.vec.tolist() == [[0.0, 2.0], [4.0, 6.0], [1.0, 3.0], [5.0, 7.0]]


# ---- replay -------------------------------------------------------------------------------------------------
def _transitions():
    """n-step transitions of the dict env, as pushed to replay (three pushes of 8)."""
    return [make_batch(p) for p in _collect_nstep(nstep=2, calls=3, steps_per_call=4, terminate_at=4)]


def _assert_consistent(batch):
    """Each row's leaves come from one stored transition: they agree on the step, and next_obs on its span."""
    assert batch.obs.image.dtype == torch.uint8 and batch.obs.vec.dtype == torch.float32
    assert batch.next_obs.dir.dtype == torch.int64
    assert torch.allclose(batch.obs.vec[:, 0], _t(batch.obs).float() / 10)
    assert (batch.obs.dir == _t(batch.obs) % 4).all()
    assert (_t(batch.next_obs) == _t(batch.obs) + batch.span.long()).all()


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("path", ["host", "device"])
def test_replay_stores_and_samples_tree_obs_per_leaf(prioritized, path, monkeypatch):
    if path == "device":  # the device path (pinned staging, device sum tree) on CPU tensors
        monkeypatch.setattr(placement, "host_path", lambda device: False)
    sampler = PrioritizedSampler(20, seed=0) if prioritized else None
    buffer = ReplayBuffer(20, sampler)
    pushes = _transitions()
    assert sum(len(p.reward) for p in pushes) == 22  # 6 (a window waits for the next call), 8, 8: the ring wraps
    for push in pushes:
        buffer.push(push)
    assert len(buffer) == 20
    stored = buffer.storage.fields
    assert is_tree(stored["obs"]) and stored["obs"].image.shape == (20, 3, 5, 5)
    assert stored["obs"].image.dtype == torch.uint8 and stored["next_obs"].vec.dtype == torch.float32
    # the ring holds the newest 20, oldest first
    newest = cat([p.obs for p in pushes])[-20:]
    chrono = buffer.storage.gather(buffer.storage.chronological())
    for (path_, got), (_, want) in zip(leaves(chrono["obs"]), leaves(newest)):
        assert torch.equal(got, want), path_
    for _ in range(3):
        batch = buffer.sample(16)
        assert is_tree(batch.obs) and len(batch.index) == 16
        _assert_consistent(batch)
        for (_, got), (_, want) in zip(leaves(batch.obs), leaves(stored["obs"].index_select(0, batch.index))):
            assert torch.equal(got, want)
        if prioritized:
            buffer.update_priority(batch.index, _t(batch.obs).float() + 0.1)
    if prioritized:  # priorities shape what is drawn: step-0 observations (priority 0.1) are rare
        drawn = torch.cat([_t(buffer.sample(64).obs) for _ in range(5)])
        assert (drawn == 0).float().mean() < 0.1


def test_replay_checkpoint_of_tree_obs_loads_with_weights_only(tmp_path):
    buffer = ReplayBuffer(20, PrioritizedSampler(20, seed=0))
    for push in _transitions():
        buffer.push(push)
    state = buffer.state_dict()

    def plain(value):  # nothing but dicts, tensors and numbers: what weights_only reads
        if isinstance(value, dict):
            return all(plain(v) for v in value.values())
        return type(value) in (torch.Tensor, int, float, bool, str) or value is None

    assert plain(state) and type(state["storage"]["fields"]["obs"]) is dict
    file = io.BytesIO()
    torch.save(state, file)
    file.seek(0)
    loaded = torch.load(file, weights_only=True)
    restored = ReplayBuffer(20, PrioritizedSampler(20, seed=0))
    restored.load_state_dict(loaded)
    assert len(restored) == 20
    for key in ("obs", "next_obs"):
        got, want = restored.storage.fields[key], buffer.storage.fields[key]
        assert is_tree(got)
        for (path, g), (_, w) in zip(leaves(got), leaves(want)):
            assert g.dtype == w.dtype and torch.equal(g, w), (key, path)
    _assert_consistent(restored.sample(8))
    restored.push(_transitions()[0])  # and it goes on storing
    assert len(restored) == 20


def test_replay_memory_estimate_counts_every_leaf(monkeypatch):
    push = _transitions()[0]
    storage = RingStorage(1000)
    # per transition: obs and next_obs (OBS_BYTES each), action (int64), reward, discount (float32),
    # terminated, truncated (bool), span (uint8)
    per_transition = 2 * OBS_BYTES + 8 + 4 + 4 + 1 + 1 + 1
    assert storage.nbytes(push) == 1000 * per_transition
    monkeypatch.setattr(placement, "host_memory_bytes", lambda: 1000 * per_transition - 1)
    with pytest.raises(ReplayMemoryError, match=f"{1000 * per_transition:,} bytes"):
        storage.extend(push)
    monkeypatch.setattr(placement, "host_memory_bytes", lambda: 1000 * per_transition)
    storage.extend(push)
    assert storage.nbytes() == 1000 * per_transition


def test_replay_reshards_tree_obs():
    source = ReplayBuffer(30)
    for push in _transitions():
        source.push(push)
    state = source.state_dict()
    parts = []
    for rank in range(2):
        buffer = ReplayBuffer(30)
        load_shards(buffer, shard_plan(1, 2, rank), lambda n: state, lambda: ReplayBuffer(30))
        parts.append(buffer.storage.gather(buffer.storage.chronological()))
    assert [num_rows(p["obs"]) for p in parts] == [11, 11]  # 22 transitions dealt one by one
    every = source.storage.gather(source.storage.chronological())
    for (_, a), (_, b), (_, whole) in zip(leaves(parts[0]["obs"]), leaves(parts[1]["obs"]), leaves(every["obs"])):
        assert torch.equal(a, whole[0::2]) and torch.equal(b, whole[1::2])


def test_frame_stack_storage_refuses_a_tree_obs():
    storage = FrameStackStorage(64, num_envs=2, frame_stack=4)
    with pytest.raises(TypeError, match=r"dictionary observation with keys \[\['dir'\], \['image'\], \['vec'\]\]"):
        storage.extend(_transitions()[0])


class ValueOfStep(Zero):
    """An on-policy policy whose value is the step the observation says (read from every leaf it needs)."""

    def forward(self, obs, **kwargs):
        out = super().forward(obs)
        return dict(out, logp=torch.zeros(num_rows(obs)), value=self.value(obs))

    def value(self, obs):
        return _t(obs).float() + obs.vec[:, 0] * 0  # a leaf of each dtype read: a mis-cut one errors or differs


@pytest.mark.parametrize("seq_len", [None, 2], ids=["flat", "sequences"])
def test_gae_on_a_time_major_tree_rollout(seq_len):
    from middleware import gae_estimator

    ctx = OnlineRLContext()
    StepCollector(ValueOfStep(), _env(2), n_sample=8, time_major=True)(ctx)  # 4 steps of 2 envs
    assert ctx.trajectories.obs.image.shape == (4, 2, 3, 5, 5)
    gae_estimator(ValueOfStep(), gamma=1.0, lam=1.0, seq_len=seq_len)(ctx)
    tr = ctx.trajectories
    assert is_tree(tr.obs) and tr.obs.image.dtype == torch.uint8
    if seq_len is None:  # [T * E]; gamma = lam = 1: adv_t = rewards to the chunk's end + V(last next_obs) - V(obs_t)
        assert tr.obs.image.shape == (8, 3, 5, 5)
        t = _t(tr.obs).float()
        assert torch.allclose(tr.adv, (4 - t) + 4 - t)
    else:  # [E * T / L, L]
        assert tr.obs.image.shape == (4, 2, 3, 5, 5) and tr.obs.dir.shape == (4, 2)
        assert _t(tr.obs.flatten(0, 1)).view(4, 2).tolist() == [[0, 1], [2, 3], [0, 1], [2, 3]]


def test_a_batch_holds_a_tree_field_as_keys_of_its_own():
    """make_batch takes a tree field's keys into the batch: batch-wide indexing, reshaping and moves reach
    every leaf (an opaque tree leaf would fail them)."""
    tree = to_tensor({"image": np.zeros((4, 2, 3), np.uint8), "nest": {"vec": np.arange(8, dtype=np.float32)
                                                                        .reshape(4, 2)}})
    batch = make_batch({"obs": tree, "reward": torch.arange(4.0)})
    assert sorted(path for path, _ in leaves(batch)) == [("obs", "image"), ("obs", "nest", "vec"), ("reward",)]
    part = batch[1:3].to("cpu")
    assert part.obs.nest.vec.tolist() == [[2.0, 3.0], [4.0, 5.0]] and part.obs.image.dtype == torch.uint8
    assert stack([batch, batch]).flatten(0, 1).obs.image.shape == (8, 2, 3)


def test_env_groups_stepped_as_one_vector_env_join_tree_obs():
    """EnvGroups as a plain vector env (the loop not overlapped): its dict outputs joined key by key."""
    env = _env(3, groups=2, terminate_at=2)
    loop = EnvLoop(Zero(), env, seed=0, overlap=False)
    steps = [loop.step() for _ in range(2)]
    env.close()
    assert loop.obs.image.shape == (3, 3, 5, 5) and _t(loop.obs).tolist() == [0, 0, 0]
    assert _t(steps[1].next_obs).tolist() == [2, 2, 2] and steps[1].next_obs.dir.tolist() == [2, 2, 2]


def test_episode_collector_joins_tree_episodes():
    from middleware import EpisodeCollector

    ctx = OnlineRLContext()
    EpisodeCollector(Zero(), _env(2, terminate_at=3), n_episode=2)(ctx)
    tr = ctx.trajectories
    assert is_tree(tr.obs) and tr.obs.image.dtype == torch.uint8 and num_rows(tr.obs) == len(tr.reward) == 6
    assert _t(tr.obs).tolist() == [0, 1, 2, 0, 1, 2] and _t(tr.next_obs).tolist() == [1, 2, 3, 1, 2, 3]
    assert all(is_tree(episode.obs) and num_rows(episode.obs) == 3 for episode in ctx.episodes)
