"""Replay on the learner's device (``policy.other.replay_buffer.device``), checked on the CPU.

The device path (pinned staging, torch sum tree, host reads deferred or avoided) is the one switch
``data.replay.device.host_path``: patched to False it runs on CPU tensors with real data, and must give the
host path's samples bit for bit. The meta device has no data at all: code that reads a device value on the
host, or mixes a host tensor into device arithmetic, fails there. The same checks on a GPU are in
tests/gpu/test_cuda.py.
"""
from __future__ import annotations

import copy

import pytest
import torch

import data.replay.device as placement
from data.replay import (FrameStackStorage, PrioritizedReplayParams, PrioritizedSampler, ReplayBuffer,
                         ReplayBufferParams, RingStorage, UniformSampler)
from data.replay.device import (DeferredCheck, DeferredReadout, PinnedStaging, ReplayMemoryError, ensure_fits,
                                free_bytes, resolve_replay_device)
from data.replay.reshard import load_shards
from data.replay.sumtree import DeviceSumTree, SumTree
from engine.devices import DeviceError
from pipelines import stages

ENVS, K, HW = 2, 4, 6


def frame_pushes(num_envs=ENVS, steps=40, pushes=6, k=K, hw=HW, episode=17, seed=0):
    """Pushes laid out as a collector's (whole vector steps, time-major; n-step 1), with frame stacks
    zero-padded at episode starts and episodes of ``episode`` steps, staggered per env."""
    g = torch.Generator().manual_seed(seed)

    def frame():
        return torch.randint(1, 256, (hw, hw), generator=g, dtype=torch.uint8)

    stacks = [torch.cat([torch.zeros(k - 1, hw, hw, dtype=torch.uint8), frame()[None]]) for _ in range(num_envs)]
    clock = [3 * e for e in range(num_envs)]
    out = []
    for _ in range(pushes):
        rows = []
        for _ in range(steps):
            for e in range(num_envs):
                nxt = torch.cat([stacks[e][1:], frame()[None]])
                clock[e] += 1
                done = clock[e] % episode == 0
                rows.append((stacks[e], nxt, done))
                stacks[e] = torch.cat([torch.zeros(k - 1, hw, hw, dtype=torch.uint8), frame()[None]]) if done else nxt
        n = len(rows)
        out.append(dict(obs=torch.stack([r[0] for r in rows]), next_obs=torch.stack([r[1] for r in rows]),
                        action=torch.randint(0, 6, (n,), generator=g), reward=torch.randn(n, generator=g),
                        terminated=torch.tensor([r[2] for r in rows]), truncated=torch.zeros(n, dtype=torch.bool),
                        discount=torch.full((n,), 0.99), span=torch.ones(n, dtype=torch.uint8)))
    return out


def flat_pushes(pushes=6, n=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [dict(obs=torch.randn(n, 3, generator=g), next_obs=torch.randn(n, 3, generator=g),
                 action=torch.randint(0, 2, (n,), generator=g), reward=torch.randn(n, generator=g),
                 terminated=torch.rand(n, generator=g) < 0.1) for _ in range(pushes)]


def make_buffer(frames, prioritized, device="cpu", capacity=96):
    storage = FrameStackStorage(capacity, ENVS, K, device=device) if frames else RingStorage(capacity, device)
    sampler = (PrioritizedSampler(capacity, alpha=0.6, beta=0.4, seed=3, device=device) if prioritized
               else UniformSampler(torch.Generator().manual_seed(3), device=device))
    return ReplayBuffer(capacity, sampler, storage)


def replay(buffer, pushes, prioritized, batches=4, batch_size=16):
    """Push, then sample (and write priorities back), as a learner does; every field of every batch."""
    g = torch.Generator().manual_seed(11)
    seen = []
    for push in pushes:
        buffer.push(push)
        for _ in range(batches):
            data = buffer.sample(batch_size)
            seen.append({k: getattr(data, k).cpu() for k in data.keys()})
            if prioritized:
                buffer.update_priority(data.index, torch.rand(batch_size, generator=g) * 2)
    return seen


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            assert torch.equal(x[key], y[key]), key


@pytest.fixture
def device_path(monkeypatch):
    """The device path on CPU tensors."""
    monkeypatch.setattr(placement, "host_path", lambda device: False)


CASES = [(False, False), (False, True), (True, False), (True, True)]
IDS = ["flat-uniform", "flat-prioritized", "frames-uniform", "frames-prioritized"]


@pytest.mark.parametrize("frames,prioritized", CASES, ids=IDS)
def test_replay_device_path_samples_what_the_host_path_samples(frames, prioritized, monkeypatch):
    pushes = frame_pushes() if frames else flat_pushes()
    host = replay(make_buffer(frames, prioritized), pushes, prioritized)
    monkeypatch.setattr(placement, "host_path", lambda device: False)
    device = make_buffer(frames, prioritized)
    assert device.sampler._staging.staged and not device.sampler._staging.pinned  # no CUDA here: no pinning
    assert_same(host, replay(device, pushes, prioritized))
    if frames:
        assert any(s["terminated"].any() for s in host)  # final stacks were rebuilt too


@pytest.mark.parametrize("spec", ["cpu", "learn"])
def test_replay_buffer_stage_on_cpu_gives_the_default_samples(spec):
    def build(device):
        settings = PrioritizedReplayParams(replay_buffer_size=96, alpha=0.6, beta=0.4, device=device)
        return stages.replay_buffer(settings, priority=True, obs_shape=(K, HW, HW), seed=5, frame_stack=K,
                                    num_envs=ENVS, learn_device="cpu")

    default = build(None)
    assert default.device == torch.device("cpu")
    assert_same(replay(default, frame_pushes(), True), replay(build(spec), frame_pushes(), True))


def test_resolve_replay_device():
    assert resolve_replay_device(None) == torch.device("cpu")
    assert resolve_replay_device("cpu") == torch.device("cpu")
    assert resolve_replay_device("learn", torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(DeviceError, match="policy.other.replay_buffer.device='gpu'"):
        resolve_replay_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="sees 0 GPUs"):
            resolve_replay_device("cuda:0")


def test_replay_buffer_stage_learn_is_the_device_given():
    settings = ReplayBufferParams(replay_buffer_size=64, device="learn")
    assert stages.replay_buffer(settings, learn_device="meta").device == torch.device("meta")
    assert stages.replay_buffer(settings, learn_device="cpu").device == torch.device("cpu")
    with pytest.raises(ValueError, match="pass the policy's device"):
        stages.replay_buffer(settings)


def test_device_path_reads_nothing_back_and_mixes_no_host_tensor():
    """On the meta device a host read (``bool``, ``item``, a boolean mask) or host arithmetic raises."""
    pushes = frame_pushes(pushes=2)
    storage = FrameStackStorage(96, ENVS, K, device="meta")
    for push in pushes:
        idx = storage.extend(push)
    assert idx.device.type == "meta"
    slots = torch.arange(0, 32, device="meta")
    assert storage.sampleable(slots).device.type == "meta"
    rebuilt = storage.gather(slots)
    assert rebuilt["next_obs"].shape == (32, K, HW, HW) and rebuilt["obs"].device.type == "meta"
    for sampler in (PrioritizedSampler(96, seed=0, device="meta"), UniformSampler(device="meta")):
        buffer = ReplayBuffer(96, sampler, RingStorage(96, "meta"))
        for push in flat_pushes(pushes=2):
            buffer.push(push)
        data = buffer.sample(8)
        assert {getattr(data, k).device.type for k in data.keys()} == {"meta"}
        if isinstance(sampler, PrioritizedSampler):
            buffer.update_priority(data.index, torch.ones(8, device="meta"))


def test_ring_storage_too_large_for_the_device_fails_at_its_first_push(monkeypatch):
    monkeypatch.setattr(placement, "free_bytes", lambda device: 10_000)
    storage = RingStorage(1000)
    with pytest.raises(ReplayMemoryError) as err:
        storage.extend({"obs": torch.zeros(4, 3), "action": torch.zeros(4, dtype=torch.int64)})
    needed = 1000 * (3 * 4 + 8)
    assert f"needs {needed:,} bytes" in str(err.value) and "10,000 bytes" in str(err.value)
    assert "replay_buffer_size" in str(err.value) and "device='cpu'" in str(err.value)
    assert storage.fields == {}  # nothing was allocated
    monkeypatch.setattr(placement, "free_bytes", lambda device: needed + (2 << 30))
    storage.extend({"obs": torch.zeros(4, 3), "action": torch.zeros(4, dtype=torch.int64)})
    assert storage.nbytes() == needed


def test_frame_storage_too_large_fails_at_construction_from_the_config_obs_shape(monkeypatch):
    monkeypatch.setattr(placement, "free_bytes", lambda device: 1 << 30)
    settings = ReplayBufferParams(replay_buffer_size=1_000_000, device="cpu")
    with pytest.raises(ReplayMemoryError, match=r"needs 35,\d{3},\d{3},\d{3} bytes .* 1,073,741,824 bytes"):
        stages.replay_buffer(settings, obs_shape=(4, 84, 84), seed=0, frame_stack=4, num_envs=8)
    # without the obs shape the exact check runs at the first push, before anything is allocated
    storage = FrameStackStorage(96, ENVS, K)
    monkeypatch.setattr(placement, "free_bytes", lambda device: 1000)
    with pytest.raises(ReplayMemoryError, match="frame-stack replay storage"):
        storage.extend(frame_pushes(pushes=1)[0])
    assert storage._frames is None and len(storage) == 0


def test_free_bytes_reads_cuda_mem_get_info(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: calls.append(device) or (123, 456))
    assert free_bytes(torch.device("cuda", 0)) == 123 and calls == [torch.device("cuda", 0)]
    assert free_bytes(torch.device("cpu")) is None  # host memory is committed page by page: not checked ...
    ensure_fits(10 ** 6, torch.device("cpu"), "anything")
    with pytest.raises(ReplayMemoryError, match=r"needs 1,000,000,000,000,000 bytes .* of host memory once full, "
                                                r"more than this machine's .* GiB. Make policy.other"):
        ensure_fits(10 ** 15, torch.device("cpu"), "the replay storage")  # ... but never beyond the machine
    with pytest.raises(ReplayMemoryError, match="needs 124 bytes .* on cuda:0, which has 123 bytes"):
        ensure_fits(124, torch.device("cuda", 0), "the replay storage")


def test_pinned_staging_branches(monkeypatch):
    host = PinnedStaging("cpu")
    push = {"obs": torch.arange(6.0).view(3, 2)}
    assert not host.staged and host.to_device(push)["obs"] is push["obs"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert PinnedStaging("meta").staged and not PinnedStaging("meta").pinned
    assert not PinnedStaging(torch.device("cuda", 0)).pinned  # no CUDA runtime: pageable buffers
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert PinnedStaging(torch.device("cuda", 0)).pinned
    assert not PinnedStaging("meta").pinned  # pinning is for CUDA copies only


def test_pinned_staging_buffers_grow_and_are_reused(device_path):
    staging = PinnedStaging("cpu", depth=1)
    first = {"obs": torch.arange(12.0).view(4, 3), "done": torch.tensor([True, False, True, False])}
    out = staging.to_device(first)
    assert all(torch.equal(out[k], first[k]) and out[k] is not first[k] for k in first)
    buffer = staging._sets[0]["obs"]
    smaller = staging.to_device({"obs": torch.ones(2, 3), "done": torch.ones(2, dtype=torch.bool)})
    assert staging._sets[0]["obs"] is buffer and torch.equal(smaller["obs"], torch.ones(2, 3))
    assert torch.equal(out["obs"], first["obs"])  # a returned tensor is its own copy, not the buffer
    larger = staging.to_device({"obs": torch.ones(5, 3), "done": torch.ones(5, dtype=torch.bool)})
    assert staging._sets[0]["obs"].numel() == 24 and larger["obs"].shape == (5, 3)  # doubled
    assert staging.buffer_bytes() == 24 * 4 + 8


def test_pinned_staging_copies_large_fields_directly(device_path, monkeypatch):
    monkeypatch.setattr(placement, "PINNED_LIMIT_BYTES", 40)
    staging = PinnedStaging("cpu")
    fields = {"small": torch.arange(10, dtype=torch.int32), "large": torch.arange(11, dtype=torch.int32)}
    out = staging.to_device(fields)
    assert set(staging._sets[0]) == {"small"} and all(torch.equal(out[k], fields[k]) for k in fields)


def test_device_tree_matches_numpy_tree():
    g = torch.Generator().manual_seed(0)
    cap = 37
    host, dev = SumTree(cap), DeviceSumTree(cap, "cpu")
    for _ in range(50):
        idx = torch.randint(0, cap, (16,), generator=g)  # with repeats: the last write wins in both
        values = torch.rand(16, generator=g, dtype=torch.float64)
        host.update(idx.numpy(), values.numpy())
        dev.update(idx, values)
    assert float(dev.total) == host.total and float(dev.min) == host.min
    mass = torch.rand(200, generator=g, dtype=torch.float64) * host.total
    assert torch.equal(dev.find_prefix_sum(mass), torch.from_numpy(host.find_prefix_sum(mass.numpy())))
    other = SumTree(cap)
    other.load_state_dict(dev.state_dict())
    assert torch.equal(other.state_dict()["sum"], host.state_dict()["sum"])


def test_non_finite_priority_on_the_device_path_is_reported_one_call_late(device_path):
    buffer = make_buffer(False, True)
    buffer.push(flat_pushes(pushes=1)[0])
    tree = buffer.sampler._tree
    before = tree[torch.arange(4)].clone()
    buffer.update_priority(torch.arange(4), torch.tensor([1.0, float("nan"), 2.0, float("inf")]))
    after = tree[torch.arange(4)]
    assert after[1] == before[1] and after[3] == before[3] and after[0] != before[0]  # bad ones left out
    assert buffer.sampler.max_priority == pytest.approx(2.0 + 1e-6)
    with pytest.raises(ValueError, match="update_priority call 1 .* NaN or infinite"):
        buffer.update_priority(torch.arange(2), torch.ones(2))


def test_deferred_check_raises_at_once_on_the_host_path():
    check = DeferredCheck(torch.device("cpu"))
    check.report(torch.tensor(False), "not raised")
    with pytest.raises(ValueError, match="raised now"):
        check.report(torch.tensor(True), "raised now")


@pytest.mark.parametrize("frames,prioritized", CASES, ids=IDS)
def test_state_dict_moves_between_host_and_device_paths(frames, prioritized, monkeypatch):
    """A checkpoint holds host tensors whichever path wrote it, and loads into the other one: buffers
    loaded from either state, on either path, then sample alike."""
    pushes = frame_pushes() if frames else flat_pushes()

    def saved(host):
        monkeypatch.setattr(placement, "host_path", lambda device: host)
        buffer = make_buffer(frames, prioritized)
        replay(buffer, pushes[:3], prioritized)
        return buffer.state_dict()

    def resumed(state, host):
        monkeypatch.setattr(placement, "host_path", lambda device: host)
        buffer = make_buffer(frames, prioritized)
        buffer.load_state_dict(state)
        return replay(buffer, pushes[3:], prioritized)

    from_host, from_device = saved(True), saved(False)
    assert {t.device.type for t in _tensors(from_device)} == {"cpu"}
    expected = resumed(from_host, True)
    assert_same(resumed(from_device, True), expected)
    assert_same(resumed(from_host, False), expected)


def _tensors(state):
    if isinstance(state, dict):
        return [t for v in state.values() for t in _tensors(v)]
    return [state] if isinstance(state, torch.Tensor) else []


def test_reshard_merges_shards_on_the_device_path(device_path):
    shards = []
    for seed in (0, 1):
        buffer = make_buffer(False, True, capacity=64)
        for push in flat_pushes(pushes=1, n=20, seed=seed):
            buffer.push(push)
        buffer.update_priority(torch.arange(20), torch.arange(20.0))
        shards.append(buffer.state_dict())
    merged = make_buffer(False, True, capacity=64)
    loaded = load_shards(merged, [(0, 0, 1), (1, 0, 1)], lambda n: shards[n],
                         lambda: make_buffer(False, True, capacity=64))
    assert loaded == 40
    fields, weights = merged.transitions()
    expected = torch.cat([flat_pushes(pushes=1, n=20, seed=s)[0]["obs"] for s in (0, 1)])
    assert torch.equal(fields["obs"], expected)
    assert torch.allclose(weights, torch.cat([(torch.arange(20.0) + 1e-6) ** 0.6] * 2).double())
    half = make_buffer(False, True, capacity=64)
    load_shards(half, [(0, 1, 2)], lambda n: shards[n], lambda: make_buffer(False, True, capacity=64))
    assert torch.equal(half.transitions()[0]["obs"], expected[:20][1::2])


def test_replay_buffer_refuses_parts_on_two_devices():
    with pytest.raises(ValueError, match="sampler .* is on cpu, the buffer on meta"):
        ReplayBuffer(8, UniformSampler(), RingStorage(8, "meta"))
    assert ReplayBuffer(8, device="meta").sampler.device == torch.device("meta")


def test_replay_device_doctests():
    import doctest

    import data.replay.device
    import data.replay.sumtree

    for module in (data.replay.device, data.replay.sumtree):
        assert doctest.testmod(module).failed == 0


class _Event:
    """A CUDA event's host side: ``query`` says whether the device passed it, ``synchronize`` waits for it."""

    def __init__(self, done):
        self.done, self.waited = done, False

    def query(self):
        return self.done

    def synchronize(self):
        self.waited = self.done = True


def test_deferred_check_reads_what_the_device_has_computed_and_waits_only_when_far_behind(monkeypatch):
    """Flags whose events the device has passed are read without a wait; one still being computed stops the
    reading (the host runs on); past MAX_PENDING unread flags the oldest is waited for."""
    monkeypatch.setattr(placement, "host_path", lambda device: False)
    check = DeferredCheck(torch.device("cpu"))
    done, behind = _Event(True), _Event(False)
    check._pending.extend([(torch.tensor(False), done, "a"), (torch.tensor(True), behind, "bad, seen later")])
    check._read(wait=False)
    assert len(check._pending) == 1 and not behind.waited  # the finished one read, the running one left
    monkeypatch.setattr(DeferredCheck, "MAX_PENDING", 2)
    check._pending.append((torch.tensor(False), _Event(False), "c"))
    with pytest.raises(ValueError, match="bad, seen later"):
        check.report(torch.tensor(False), "d")  # a 4th flag: past 2 unread, the oldest is waited for
    assert behind.waited and not check._pending


class _UncopyableEvent(_Event):
    """Like torch.cuda.Event: neither pickled nor deep-copied."""

    def __reduce_ex__(self, protocol):
        raise TypeError("cannot pickle 'Event' object")


def test_a_deferred_check_is_copied_after_its_pending_flags_are_read(monkeypatch):
    """A replay is deep-copied (a test's eager twin, a user's snapshot) with its checks' flags read first: the
    copy holds none (events cannot be copied), and a flag that held is raised at the copy, not lost."""
    monkeypatch.setattr(placement, "host_path", lambda device: False)
    check = DeferredCheck(torch.device("cpu"))
    check._pending.append((torch.tensor(False), _UncopyableEvent(False), "fine"))
    twin = copy.deepcopy(check)
    assert not twin._pending and not check._pending and twin.device == check.device
    check._pending.append((torch.tensor(True), _UncopyableEvent(False), "held at update 3"))
    with pytest.raises(ValueError, match="held at update 3"):
        copy.deepcopy(check)


def test_a_staging_is_copied_after_its_copies_are_done(monkeypatch):
    """PinnedStaging's events (the device has read buffer set i) are waited for before a copy and not copied."""
    monkeypatch.setattr(placement, "host_path", lambda device: False)
    staging = PinnedStaging(torch.device("cpu"))
    pending = _UncopyableEvent(False)
    staging._copied[0] = pending
    twin = copy.deepcopy(staging)
    assert pending.waited and twin._copied == [None, None] and twin.staged == staging.staged


def test_deferred_readout_gives_the_newest_finished_call_and_waits_only_for_the_first_or_far_behind(monkeypatch):
    """The learner's statistics on a GPU: each call's copy is read once its event has passed, the newest read
    is what the call gets; nothing is waited for but the first call's and, past MAX_PENDING unread, the
    oldest's. On the CPU the values come back at once."""
    assert DeferredReadout(torch.device("cpu")).read(["loss"], torch.tensor([0.5])) == {"loss": 0.5}
    readout = DeferredReadout(torch.device("cpu"))
    first = _Event(False)
    readout._pending.append((["loss"], torch.tensor([1.0]), first))
    assert readout._newest() == {"loss": 1.0} and first.waited  # nothing read yet: the first is waited for
    done, behind = _Event(True), _Event(False)
    readout._pending.extend([(["loss", "q"], torch.tensor([2.0, 3.0]), done), (["loss"], torch.tensor([4.0]), behind)])
    assert readout._newest() == {"loss": 2.0, "q": 3.0} and not behind.waited  # the host runs on
    monkeypatch.setattr(DeferredReadout, "MAX_PENDING", 1)
    readout._pending.append((["loss"], torch.tensor([5.0]), _Event(False)))
    assert readout._newest() == {"loss": 4.0} and behind.waited and len(readout._pending) == 1



def test_pushes_on_the_device_path_write_the_rings_through_the_staging_buffers(monkeypatch):
    """A flat push goes from its staging buffer straight into the ring's rows (``PinnedStaging.write_rows``: no
    device tensor made and copied again), wrapping at the ring's end, and the rings hold what the host path's do."""
    from data.replay.storage import RingStorage

    host = RingStorage(5, "cpu")
    monkeypatch.setattr(placement, "host_path", lambda device: False)
    device = RingStorage(5, "cpu")
    assert device._staging.staged and not host._staging.staged
    made = []
    real_empty = torch.empty

    def counting_empty(*args, **kwargs):
        made.append(args)
        return real_empty(*args, **kwargs)

    for n in (3, 4, 4, 2):  # the second and third wrap
        push = {"obs": torch.randn(n, 2), "done": torch.rand(n) < 0.5, "action": torch.arange(n)}
        slots = host.extend(push)
        made.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(torch, "empty", counting_empty)
            assert torch.equal(device.extend(push), slots)
        for key in push:
            assert torch.equal(device.fields[key][:len(host)], host.fields[key][:len(host)]), key
    assert made == []  # past the first pushes (the rings, each set's buffers), nothing is allocated
    assert set(device._staging._sets[0]) == {"obs", "done", "action"}


@pytest.mark.parametrize("path", ["host", "device"])
def test_a_push_whose_fields_differ_in_rows_is_refused_naming_them(path, monkeypatch):
    """Found in review: the device path's one-copy write took each field's own row count, so a short field left
    rows unwritten (and counted) and a long one wrote past the push; both paths now refuse it first."""
    from data.replay.storage import RingStorage

    if path == "device":
        monkeypatch.setattr(placement, "host_path", lambda device: False)
    storage = RingStorage(8, "cpu")
    storage.extend({"obs": torch.randn(2, 3), "reward": torch.randn(2)})
    with pytest.raises(ValueError, match=r"'reward': 3"):
        storage.extend({"obs": torch.randn(4, 3), "reward": torch.randn(3)})
    assert len(storage) == 2 and storage._cursor == 2
