"""The CUDA paths, run on a GPU machine with ``pytest -m gpu`` (skipped without CUDA; CI has no GPU).

Each test is a real training run or launch on the GPU(s) of the machine: nccl in a process group (one
process per GPU), two processes sharing one GPU through gloo, the learner on CUDA with the collector on the
CPU, and the device check on CUDA tensors; and the compiled hot paths (``policy.compile``: inductor, CUDA
graphs; ``policy.amp``) against eager on CUDA.
"""
from __future__ import annotations

import copy
import glob
import importlib
import json
import os
import sys

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(150),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run with pytest -m gpu on a GPU)")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))  # ddp_workers, importable in spawned processes

DDP_CONFIGS = sorted(os.path.relpath(p, ROOT)[:-3].replace(os.sep, ".") for p in
                     glob.glob(os.path.join(ROOT, "dizoo", "**", "config", "**", "*_ddp_config.py"), recursive=True))


def _small(module_name, exp_dir):
    module = importlib.import_module(module_name)
    main = copy.deepcopy(module.main_config)
    main.exp_name = str(exp_dir)
    main.policy.cuda = True
    main.log = dict(progress=False)
    return main, copy.deepcopy(module.create_config)


def _nccl_worker(module_name, exp_dir):
    from engine.distributed import get_world_size
    from pipelines import serial_pipeline

    assert torch.distributed.get_backend() == "nccl" and get_world_size() >= 1
    # exp_name names the run directory exactly (a config's exp_name would get the ``_seed0`` suffix)
    summary = serial_pipeline(_small(module_name, exp_dir), max_env_step=256, exp_name=str(exp_dir))
    assert summary["env_step"] >= 256


@pytest.mark.parametrize("config", DDP_CONFIGS)
def test_every_ddp_config_runs_with_nccl_on_each_gpu(config, tmp_path):
    """One process per visible GPU (at least one), nccl: DDP wrapping on cuda:LOCAL_RANK and the ddp
    middleware's collectives on the GPU (the bug this issue fixes: a CPU tensor under nccl)."""
    for family, module in (("atari", "ale_py"), ("mujoco", "mujoco")):  # the env family's extra
        if family in config:
            pytest.importorskip(module)
    from engine import launch

    # a file rendezvous makes a process group even of one process (a 1-GPU machine): nccl is then really used
    launch(_nccl_worker, nprocs=torch.cuda.device_count(), args=(config, tmp_path / "exp"), backend="nccl",
           cuda=True, timeout=120, rendezvous=f"file://{tmp_path}/rendezvous")
    assert json.loads((tmp_path / "exp" / "summary.json").read_text())["env_step"] >= 256


@pytest.mark.parametrize("config", ["dizoo.pettingzoo.config.simple_spread_mappo_config",
                                    "dizoo.pettingzoo.config.simple_spread_vdn_config"], ids=["mappo", "vdn"])
def test_several_agents_train_with_nccl_and_the_learner_on_cuda(config, tmp_path):
    """Several agents per env (issue 32): MAPPO's and VDN's Simple Spread configs, one process per GPU under
    nccl, the learner on cuda:LOCAL_RANK (the agents' tree of tensors moved to it, the weighted means' all-reduce
    on the GPU), collection on the CPU."""
    pytest.importorskip("mpe2")
    from engine import launch

    launch(_nccl_worker, nprocs=torch.cuda.device_count(), args=(config, tmp_path / "exp"), backend="nccl",
           cuda=True, timeout=120, rendezvous=f"file://{tmp_path}/rendezvous")
    assert json.loads((tmp_path / "exp" / "summary.json").read_text())["env_step"] >= 256


def _recurrent_vdn_run(exp_dir, cuda=True):
    """VDN's Simple Spread config with the recurrent agent, the learner and the sequence replay on the GPU."""
    from pipelines import serial_pipeline

    main, create = _small("dizoo.pettingzoo.config.simple_spread_vdn_config", exp_dir)
    main.policy.cuda = cuda
    main.env.update(collector_env_num=4, evaluator_env_num=2, n_evaluator_episode=2)
    main.policy.update(model=dict(recurrent=True), learn=dict(batch_size=64, update_per_collect=2),
                       other=dict(replay_buffer=dict(replay_buffer_size=4096, device="learn")))
    return serial_pipeline((main, create), max_env_step=512, exp_name=str(exp_dir))


def test_the_recurrent_agent_learns_on_cuda_from_sequences_replayed_there(tmp_path):
    """QMIX's recurrent agent (VDN's mixer) with its sequence replay on the learner's GPU: sampling, the unroll
    and the update there, acting with its memory on the CPU."""
    pytest.importorskip("mpe2")
    summary = _recurrent_vdn_run(tmp_path / "exp")
    assert summary["env_step"] >= 512 and summary["train_iter"] > 0


def test_two_ranks_share_one_gpu_through_gloo_and_stay_identical(tmp_path):
    import ddp_workers
    from engine import launch

    overrides = {"0": {"cuda": True}, "1": {"cuda": True}}
    launch(ddp_workers.cartpole_run, nprocs=2, args=(str(tmp_path), overrides, 512), backend="gloo", cuda=True,
           timeout=120)
    runs = [json.load(open(tmp_path / f"run_rank{r}.json")) for r in range(2)]
    assert runs[0]["params"] == runs[1]["params"] and runs[0]["summary"]["train_iter"] > 0


def test_learn_on_cuda_collect_on_cpu(tmp_path):
    from pipelines import build_pipeline

    main, create = _small("dizoo.classic_control.cartpole.config.cartpole_dqn_config", tmp_path / "exp")
    main.policy.device = dict(collect="cpu")
    pipeline = build_pipeline((main, create), max_env_step=512)
    pipeline.run()
    policy = pipeline.policy
    assert next(policy.model.parameters()).is_cuda
    actor = policy.placement.actor("collect")
    assert not next(actor.parameters()).is_cuda
    for a, b in zip(actor.state_dict().values(), policy.model.state_dict().values()):
        assert torch.equal(a, b.cpu())


def test_device_check_names_a_cpu_tensor_in_a_cuda_model():
    import gymnasium as gym
    import numpy as np
    from easydict import EasyDict

    from engine.config import deep_merge
    from policies import DQNPolicy
    from policies.base import DeviceMismatchError

    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(cuda=True, check_device=True)))
    policy = DQNPolicy(cfg, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2))
    policy.model.register_buffer("left_behind", torch.zeros(1))
    with pytest.raises(DeviceMismatchError, match="'left_behind' is on cpu, expected cuda"):
        policy.eval_mode.forward(np.zeros((2, 3), np.float32))


# ---- replay on the learner's device (policy.other.replay_buffer.device; data.replay.device) -------------
# the pushes, buffers and replay loop of tests/data/test_replay_device.py, there checked on the CPU

REPLAY_CASES = [(False, False), (False, True), (True, False), (True, True)]
REPLAY_IDS = ["flat-uniform", "flat-prioritized", "frames-uniform", "frames-prioritized"]


def _replay_helpers():
    sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
    import test_replay_device

    return test_replay_device


def _assert_same_batches(host, device):
    assert len(host) == len(device)
    for a, b in zip(host, device):
        assert a.keys() == b.keys()
        for key in a:
            if key == "weight":  # float64 pow on the GPU may differ from numpy's in the last bit
                assert torch.allclose(a[key], b[key], rtol=1e-6, atol=0), key
            else:
                assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("frames,prioritized", REPLAY_CASES, ids=REPLAY_IDS)
def test_cuda_replay_samples_what_the_cpu_replay_samples(frames, prioritized):
    h = _replay_helpers()
    pushes = h.frame_pushes() if frames else h.flat_pushes()
    host = h.replay(h.make_buffer(frames, prioritized), pushes, prioritized)
    buffer = h.make_buffer(frames, prioritized, device="cuda")
    device = h.replay(buffer, pushes, prioritized)
    _assert_same_batches(host, device)
    batch = buffer.sample(8)
    assert all(getattr(batch, k).is_cuda for k in batch.keys())  # the learner's .to(cuda) moves nothing
    staging = buffer.storage._staging
    assert staging.pinned and all(b.is_pinned() for s in staging._sets for b in s.values())


@pytest.mark.parametrize("frames,prioritized", REPLAY_CASES, ids=REPLAY_IDS)
def test_cuda_replay_checkpoint_loads_on_the_cpu_and_back(frames, prioritized, tmp_path):
    h = _replay_helpers()
    pushes = h.frame_pushes() if frames else h.flat_pushes()

    def saved(device):
        buffer = h.make_buffer(frames, prioritized, device=device)
        h.replay(buffer, pushes[:3], prioritized)
        torch.save(buffer.state_dict(), tmp_path / f"{device}.pt")
        return torch.load(tmp_path / f"{device}.pt", map_location="cpu", weights_only=True)

    def resumed(state, device):
        buffer = h.make_buffer(frames, prioritized, device=device)
        buffer.load_state_dict(state)
        return h.replay(buffer, pushes[3:], prioritized)

    from_cuda, from_cpu = saved("cuda"), saved("cpu")
    expected = resumed(from_cpu, "cpu")
    _assert_same_batches(expected, resumed(from_cuda, "cpu"))
    _assert_same_batches(expected, resumed(from_cpu, "cuda"))


def test_cuda_replay_larger_than_free_memory_fails_before_allocating():
    from data.replay import FrameStackStorage, RingStorage
    from data.replay.device import ReplayMemoryError, free_bytes
    from pipelines import stages

    free = free_bytes(torch.device("cuda", torch.cuda.current_device()))
    allocated = torch.cuda.memory_allocated()
    capacity = free // (84 * 84 * 5) + 100_000
    with pytest.raises(ReplayMemoryError, match=r"needs [\d,]+ bytes .* on cuda:\d, which has [\d,]+ bytes"):
        FrameStackStorage(capacity, 8, 4, device="cuda", frame_shape=(84, 84))
    from data.replay import ReplayBufferParams

    settings = ReplayBufferParams(replay_buffer_size=capacity, device="cuda")
    with pytest.raises(ReplayMemoryError, match="replay_buffer_size smaller"):
        stages.replay_buffer(settings, obs_shape=(4, 84, 84), frame_stack=4, num_envs=8)
    storage = RingStorage(free // 4000 + 100_000, "cuda")
    with pytest.raises(ReplayMemoryError):
        storage.extend({"obs": torch.zeros(2, 1000)})  # 4,000 bytes a transition
    assert torch.cuda.memory_allocated() <= allocated  # nothing was allocated (earlier tests' tensors may go)


def test_cuda_replay_pushes_grow_one_pinned_buffer_per_field():
    from data.replay import RingStorage

    storage = RingStorage(64, "cuda")
    first = {"obs": torch.randn(10, 3), "done": torch.rand(10) < 0.5}
    storage.extend(first)
    second = {"obs": torch.randn(30, 3), "done": torch.rand(30) < 0.5}
    storage.extend(second)
    torch.cuda.synchronize()
    assert torch.equal(storage.fields["obs"][:40].cpu(), torch.cat([first["obs"], second["obs"]]))
    buffers = [s["obs"] for s in storage._staging._sets if "obs" in s]
    assert buffers and all(b.is_pinned() for b in buffers) and max(b.numel() for b in buffers) >= 90


def test_dqn_trains_from_a_prioritized_replay_on_cuda():
    """A short CartPole run with the replay on the learner's GPU: batches come out on cuda, priorities go
    back into the sum tree there."""
    from easydict import EasyDict

    from data.envs import make_vector_env
    from engine import OnlineRLContext, Task
    from engine.config import deep_merge
    from engine.registry import ENV_REGISTRY
    from middleware import (OffPolicyLearner, StepCollector, data_pusher, eps_greedy_handler, epsilon_schedule,
                            termination_checker)
    from pipelines import stages
    from policies import DQNPolicy

    env_type = ENV_REGISTRY.get("cartpole")
    env = make_vector_env(env_type, env_type.default_config(), 4, seed=0)
    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(cuda=True, priority=True)))
    cfg.other.replay_buffer.replay_buffer_size = 5000
    cfg.other.replay_buffer["device"] = "learn"
    policy = DQNPolicy(cfg, env.single_observation_space, env.single_action_space)
    buffer = stages.replay_buffer(policy.params.other.replay_buffer, priority=True, seed=0, learn_device=policy.device)
    assert buffer.device == policy.device
    task = Task()
    trained = []  # (batch, outputs) of each iteration that trained
    try:
        with task.start(ctx=OnlineRLContext()):
            task.use(eps_greedy_handler(epsilon_schedule("linear", 1.0, 0.05, 2000)))
            task.use(StepCollector(policy.collect_mode, env, n_sample=64, nstep=3, gamma=0.99))
            task.use(data_pusher(buffer))
            task.use(OffPolicyLearner(policy.learn_mode, buffer, batch_size=64, update_per_collect=4,
                                      priority=True))
            task.use(lambda ctx: trained.append((ctx.train_data, ctx.train_output)) if ctx.train_output else None)
            task.use(termination_checker(max_env_step=1280))
            task.run()
    finally:
        env.close()
    assert task.ctx.train_iter > 0 and trained
    data, output = trained[-1]
    assert data.obs.is_cuda and data.index.is_cuda and data.weight.is_cuda
    assert torch.isfinite(torch.tensor(output["loss"]))
    leaves = buffer.sampler.weights(torch.arange(len(buffer), device=buffer.device))
    assert leaves.is_cuda and leaves.unique().numel() > 1  # the TD errors reached the tree on the GPU


# ---- hot paths: policy.compile / policy.amp (policies.accel) ----------------------------------------------
def _pong_dqn(compile_mode, amp="none"):
    """A DQN with the Nature CNN on 4 x 84 x 84 uint8 frames, learning on cuda."""
    import gymnasium as gym
    import numpy as np
    from easydict import EasyDict

    from engine.config import deep_merge
    from policies import DQNPolicy

    torch.manual_seed(0)
    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(
        cuda=True, compile=compile_mode, amp=amp, model=dict(encoder_hidden_size_list=[512]),
        learn=dict(learning_rate=1e-4, target_update_freq=4))))
    return DQNPolicy(cfg, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6))


def _frame_batches(count, n=32):
    from data.batch import make_batch

    g = torch.Generator().manual_seed(1)
    frames = lambda: torch.randint(0, 256, (n, 4, 84, 84), generator=g, dtype=torch.uint8)  # noqa: E731
    return [make_batch(dict(obs=frames(), next_obs=frames(), action=torch.randint(0, 6, (n,), generator=g),
                            reward=torch.randn(n, generator=g), terminated=torch.rand(n, generator=g) < 0.1,
                            truncated=torch.zeros(n, dtype=torch.bool), discount=torch.full((n,), 0.99),
                            weight=torch.ones(n))) for _ in range(count)]


def _dqn_run(compile_mode, amp="none", updates=8):
    """``updates`` updates at batch 32, then greedy actions for 3 batches of 8 observations (the CUDA graphs
    record at a first call and replay after); the losses are read only after the last update (a CUDA graph
    overwrites its outputs at the next replay: the hot path hands out copies)."""
    import numpy as np

    policy = _pong_dqn(compile_mode, amp)
    initial = {k: v.clone() for k, v in policy.model.state_dict().items()}
    outputs = [policy.learn_mode.forward(b) for b in _frame_batches(updates)]
    obs = np.random.default_rng(0).integers(0, 256, (3, 8, 4, 84, 84), dtype=np.uint8)
    actions = [policy.eval_mode.forward(o)["action"] for o in obs]
    torch.cuda.synchronize()
    return policy, initial, [float(o["loss"]) for o in outputs], actions


@pytest.mark.parametrize("mode", ["compile", "cudagraph"])
def test_compiled_dqn_updates_and_acting_match_eager_on_cuda(mode, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # both paths in full fp32
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    eager, initial, eager_losses, eager_actions = _dqn_run("none")
    compiled, _, losses, actions = _dqn_run(mode)
    for key in ("learn", "loss"), ("eval", "greedy"):
        path = compiled.hot_paths[key]
        assert path.mode == mode and path.fallback_error is None, path
    assert losses == pytest.approx(eager_losses, rel=1e-3, abs=1e-5)
    for a, b in zip(actions, eager_actions):
        assert (a == b).all()
    # Adam moves every weight by about its learning rate: compiled and eager moved them alike
    for key, value in compiled.model.state_dict().items():
        moved = (eager.model.state_dict()[key] - initial[key]).norm()
        assert (value - eager.model.state_dict()[key]).norm() <= 0.02 * moved + 1e-6, key


def test_bf16_dqn_on_cuda_stays_close_to_fp32():
    _, _, fp32, _ = _dqn_run("none", updates=3)
    for mode in ("none", "cudagraph"):
        policy, _, bf16, _ = _dqn_run(mode, amp="bf16", updates=3)
        assert policy.hot_paths[("learn", "loss")].amp == "bf16"
        assert all(p.dtype == torch.float32 for p in policy.model.parameters())
        assert bf16 != fp32 and bf16 == pytest.approx(fp32, rel=0.05, abs=0.02)


def test_a_nan_loss_on_cuda_skips_its_step_and_is_raised_one_update_later():
    """The learner's loss check on a GPU waits for nothing (``policies.optim.OptimizerStep``): the fused Adam skips
    the NaN update on the device, and the error comes at the next update."""
    import gymnasium as gym
    import numpy as np
    from easydict import EasyDict

    from data.batch import make_batch
    from engine.config import deep_merge
    from policies import DQNPolicy, NonFiniteLossError

    cfg = EasyDict(deep_merge(DQNPolicy.default_config(), dict(cuda=True)))
    policy = DQNPolicy(cfg, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2))
    assert policy.optimizer_step.optimizer.defaults.get("fused")
    n = 8
    data = dict(obs=torch.randn(n, 3), next_obs=torch.randn(n, 3), action=torch.arange(n) % 2,
                reward=torch.full((n,), float("nan")), terminated=torch.zeros(n, dtype=torch.bool),
                truncated=torch.zeros(n, dtype=torch.bool), discount=torch.full((n,), 0.99), weight=torch.ones(n))
    before = [p.detach().clone() for p in policy.model.parameters()]
    policy.learn_mode.forward(make_batch(data))
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))
    with pytest.raises(NonFiniteLossError, match="seen on cuda:0 at a later update"):
        policy.learn_mode.forward(make_batch(data))


def test_a_cuda_policy_s_action_is_read_back_once_per_step_and_kept_for_the_transition():
    """A policy acting on CUDA for envs on the host: each step's action comes back once (the envs' copy, a wait),
    and the collected transitions keep that host copy: the collector reads nothing more from the device (before:
    the chunk's actions were copied back a second time, one more wait per call, per step for SAC's one-step
    calls), and the observation's copy to the device waits for nothing."""
    import warnings

    import gymnasium as gym
    import numpy as np
    from easydict import EasyDict

    from engine import OnlineRLContext
    from engine.config import deep_merge
    from middleware import StepCollector
    from policies.sac import SACPolicy

    cfg = EasyDict(deep_merge(SACPolicy.default_config(), dict(cuda=True)))
    env = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 2,
                                   autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    policy = SACPolicy(cfg, env.single_observation_space, env.single_action_space)
    collector = StepCollector(policy.collect_mode, env, n_sample=2 * 8, seed=0)
    ctx = OnlineRLContext()
    collector(ctx)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            collector(ctx)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    waits = [f"{os.path.basename(w.filename)}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]
    assert not [w for w in waits if w.startswith(("collector.py", "normalisation.py", "devices.py"))], waits  # the
    # observation goes to the device through pinned memory (engine.devices.to_device_async), waiting for nothing
    assert sum(w.startswith("env_loop.py") for w in waits) == 8, waits  # one action read per step
    assert ctx.trajectories["action"].device.type == "cpu"
    low, high = np.asarray(env.single_action_space.low), np.asarray(env.single_action_space.high)
    actions = ctx.trajectories["action"].numpy()
    assert bool((actions >= low).all() and (actions <= high).all())
