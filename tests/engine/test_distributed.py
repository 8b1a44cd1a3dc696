"""Distributed paths, each with 2 real gloo processes and a timeout so that a hang fails the test."""
from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

import ddp_workers
from engine import launch
from engine.distributed import (DDPContext, DistributedError, RendezvousError, allreduce_data, broadcast_object,
                                get_world_size)
from tests_support import concat, dqn_policy_and_batches

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DDP_CONFIG = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_ddp_config.py")
TIMEOUT = 30.0  # seconds for every collective in these jobs


def _read(out_dir, name):
    return [json.load(open(os.path.join(out_dir, f"{name}_rank{r}.json"))) for r in range(2)]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_collectives_sum_max_mean_and_broadcast(tmp_path):
    launch(ddp_workers.collectives, nprocs=2, args=(str(tmp_path),), timeout=TIMEOUT)
    r0, r1 = _read(tmp_path, "coll")
    for r in (r0, r1):
        assert r["sum"] == 3.0 and r["max"] == 1.0 and r["mean"] == [1.0, 1.5]
        assert r["obj"] == {"from": 0} and r["world"] == 2


def test_each_launch_gives_the_ranks_the_callers_environment_and_directory_at_the_call(tmp_path, monkeypatch):
    # the ranks fork from a server started at the first launch: what they see must be the caller's state at
    # each call, not the server's from its start (a stale MASTER_PORT would make the second job hang)
    seen = []
    for mark in ("first", "second"):
        out = tmp_path / mark
        out.mkdir()
        monkeypatch.setenv("BATON_TEST_MARK", mark)
        monkeypatch.chdir(out)
        launch(ddp_workers.environment, nprocs=2, args=(str(out),), timeout=TIMEOUT)
        seen.append(_read(out, "env"))
        assert [r["port"] for r in seen[-1]] == [os.environ["MASTER_PORT"]] * 2  # the port launch chose for this job
    for mark, ranks in zip(("first", "second"), seen):
        assert [r["mark"] for r in ranks] == [mark, mark]
        assert {r["cwd"] for r in ranks} == {str(tmp_path / mark)}
    assert len({r["pid"] for ranks in seen for r in ranks}) == 4


def test_collectives_are_identity_in_one_process():
    assert get_world_size() == 1
    assert allreduce_data(2.5) == 2.5 and broadcast_object({"a": 1}) == {"a": 1}
    with DDPContext() as ctx:
        assert ctx.world_size == 1


def test_ddp_learner_step_equals_single_process_step_on_concatenated_batches(tmp_path):
    launch(ddp_workers.one_learner_step, nprocs=2, args=(str(tmp_path),), timeout=TIMEOUT)
    r0, r1 = _read(tmp_path, "step")
    policy, batches = dqn_policy_and_batches(seed=0)  # rank 0's init, which DDP broadcast
    policy.learn_mode.forward(concat(batches))
    for key, value in policy.model.state_dict().items():
        assert torch.allclose(torch.tensor(r0[key]), value.flatten(), atol=1e-6), key
        assert r0[key] == r1[key], key


def test_ddp_pipeline_keeps_ranks_identical_and_counters_global(tmp_path):
    launch(ddp_workers.cartpole_run, nprocs=2, args=(str(tmp_path),), timeout=TIMEOUT)
    r0, r1 = _read(tmp_path, "run")
    assert r0["params"] == r1["params"] and r0["target"] == r1["target"]
    s0, s1 = r0["summary"], r1["summary"]
    assert s0["train_iter"] == s1["train_iter"] > 0
    # each rank collects 32 per iteration: the global count is the sum over both ranks
    assert s0["env_step"] == s1["env_step"] and s0["env_step"] % 64 == 0 and s0["env_step"] >= 1024
    assert s0["world_size"] == 2 and os.path.isfile(tmp_path / "exp_seed0" / "summary.json")
    assert s0["run_dir"] == s1["run_dir"] == str(tmp_path / "exp_seed0")  # rank 0 chose, every rank knows


def test_ddp_counters_are_sums_and_rank0_stop_ends_all_ranks_in_same_iteration(tmp_path):
    launch(ddp_workers.counters_and_stop, nprocs=2, args=(str(tmp_path),), timeout=TIMEOUT)
    r0, r1 = _read(tmp_path, "toy")
    for r in (r0, r1):
        assert r["total_step"] == 4  # rank 0 stopped in iteration 3 (0-based); rank 1's own stop was ignored
        assert r["env_step"] == 4 * (3 + 5) and r["env_episode"] == 4 * 1
        assert r["eval_value"] == 42.0 and r["stop_reason"] == "stop_value"


def test_ddp_ranks_envs_produce_different_first_observations(tmp_path):
    launch(ddp_workers.first_observations, nprocs=2, args=(str(tmp_path),), timeout=TIMEOUT)
    r0, r1 = _read(tmp_path, "obs")
    assert r0 != r1
    assert all(a != b for a, b in zip(r0, r1))


def test_ddp_rank_whose_buffer_is_not_ready_does_not_hang_the_other(tmp_path):
    # rank 1 needs 300 transitions before it may train (ten iterations of 32), rank 0 only 64: rank 0
    # must wait for it, not hang in a backward that rank 1 skips
    overrides = {"1": {"random_collect_size": 300}}
    launch(ddp_workers.cartpole_run, nprocs=2, args=(str(tmp_path), overrides, 1024), timeout=TIMEOUT)
    r0, r1 = _read(tmp_path, "run")
    assert r0["summary"]["train_iter"] == r1["summary"]["train_iter"] > 0
    assert r0["params"] == r1["params"]


def test_ddp_rank_that_raises_fails_the_whole_job_with_its_error(tmp_path):
    start = time.monotonic()
    with pytest.raises(DistributedError, match="(?s)rank 1 of 2 failed first.*rank 1 failed on purpose"):
        launch(ddp_workers.raise_on_rank1, nprocs=2, args=(str(tmp_path),), timeout=TIMEOUT)
    assert time.monotonic() - start < TIMEOUT + 30


def test_ddp_unreachable_master_is_a_clear_error_within_timeout(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))  # nobody listens there
    start = time.monotonic()
    with pytest.raises(RendezvousError, match=r"rank 1 of 2 could not reach rank 0 at 127\.0\.0\.1:\d+ within 3 s: "
                                              r"nothing accepted a connection there \(Connection refused\)"):
        with DDPContext(rank=1, world_size=2, timeout=3):
            pass
    assert time.monotonic() - start < 30


def test_multi_gpu_without_launcher_warns_and_runs(quick_cartpole_config, caplog):
    from pipelines import serial_pipeline
    main, create = quick_cartpole_config
    main.policy.multi_gpu = True
    summary = serial_pipeline((main, create), max_env_step=64)
    assert "world size is 1" in caplog.text
    assert summary["env_step"] >= 64


@pytest.mark.slow
@pytest.mark.parametrize("config", ["dizoo.classic_control.cartpole.config.cartpole_ppo_ddp_config",
                                    "dizoo.classic_control.pendulum.config.pendulum_sac_config",
                                    "dizoo.classic_control.pendulum.config.pendulum_td3_config"])
def test_ddp_on_policy_and_sac_keep_ranks_identical(config, tmp_path):
    warmup = "sac" in config or "td3" in config
    overrides = {"0": {"random_collect_size": 64}, "1": {"random_collect_size": 64}} if warmup else {}
    launch(ddp_workers.cartpole_run, nprocs=2, args=(str(tmp_path), overrides, 768, config), timeout=TIMEOUT)
    r0, r1 = _read(tmp_path, "run")
    assert r0["summary"]["train_iter"] == r1["summary"]["train_iter"] > 0
    assert r0["params"] == r1["params"] and r0["target"] == r1["target"]


def _run_launcher(cmd, tmp_path):
    env = dict(os.environ, BATON_DDP_TIMEOUT=str(TIMEOUT))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=150, cwd=tmp_path, env=env)


DDP_CONFIGS = sorted(glob.glob(os.path.join(ROOT, "dizoo", "**", "config", "**", "*_ddp_config.py"), recursive=True))


ALL_CONFIGS_JOB = """
import json, os, sys
from engine.distributed import DDPContext, get_rank
from pipelines import serial_pipeline
from commands import load_config_file
from engine.overrides import apply_overrides

out = sys.argv[1]
with DDPContext():  # one process group for every config: a torchrun start per config costs seconds each
    for path in sys.argv[2:]:
        quick = ["env.max_episode_steps=64", "env.evaluator_env_num=2", "env.n_evaluator_episode=2"] \
            if "atari" in path or "mujoco" in path else []
        if "ppo" in path:  # one small collect and epoch: a full one of Pendulum's is 4,096 steps x 10 epochs
            quick += ["policy.collect.n_sample=64", "policy.learn.epoch_per_collect=1", "policy.learn.batch_size=64"]
        main, create = apply_overrides(*load_config_file(path), quick)
        name = os.path.basename(path)
        summary = serial_pipeline((main, create), max_env_step=256, exp_name=os.path.join(out, name), progress=False)
        with open(os.path.join(out, f"{name}.rank{get_rank()}.json"), "w") as f:
            json.dump(summary, f)
"""


def test_every_ddp_config_trains_under_torchrun(tmp_path):
    """Each DDP config's standard pipeline not trained under DDP by another test, 2 ranks under torchrun, one
    after the other in one job (the configs' own script entry under torchrun is run by the docs' commands,
    tests/test_doc_commands.py)."""
    script = tmp_path / "all_configs.py"
    script.write_text(ALL_CONFIGS_JOB)
    # trained under DDP elsewhere: the CartPole DQN and PPO configs (and the Pendulum SAC and TD3 configs, which
    # run data-parallel as they are, above; BC, CQL and TD3+BC by the docs' commands and the offline DDP tests)
    elsewhere = ("cartpole_dqn_ddp", "cartpole_ppo_ddp")
    # MuJoCo: hopper_ppo_ddp (PPO and policy.obs_norm merged across ranks) trains here; halfcheetah_ppo_ddp is
    # compiled in tests/dizoo/test_configs.py (the same algorithm and settings on another body)
    compiled_only = ("halfcheetah_",)
    configs = [c for c in DDP_CONFIGS if ("atari" not in c or _has("ale_py")) and ("mujoco" not in c or _has("mujoco"))
               and not os.path.basename(c).startswith(elsewhere + compiled_only)]
    env = dict(os.environ, BATON_DDP_TIMEOUT=str(TIMEOUT), OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(tmp_path), *configs], capture_output=True, text=True, timeout=400,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for config in configs:
        name = os.path.basename(config)
        summaries = [json.loads((tmp_path / f"{name}.rank{r}.json").read_text()) for r in range(2)]
        assert [s["world_size"] for s in summaries] == [2, 2], name
        assert summaries[0]["env_step"] == summaries[1]["env_step"] >= 256, name


def _has(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None


def test_torchrun_job_with_failing_rank_exits_nonzero_with_error(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(
        "import sys; sys.path.insert(0, %r)\n"
        "import ddp_workers\n"
        "from engine.distributed import DDPContext\n"
        "with DDPContext():\n"
        "    ddp_workers.raise_on_rank1('.')\n" % os.path.dirname(os.path.abspath(__file__)))
    start = time.monotonic()
    proc = _run_launcher([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(script)], tmp_path)
    assert proc.returncode != 0
    assert "rank 1 failed on purpose" in proc.stderr
    assert time.monotonic() - start < TIMEOUT + 60


def test_a_process_group_of_one_runs_the_ddp_pipeline(tmp_path):
    """One process in a real group (a file rendezvous): DDP wrapping and the per-iteration sync with a world
    of one, as a single GPU under nccl runs them."""
    launch(ddp_workers.group_of_one, nprocs=1, args=(str(tmp_path),), rendezvous=f"file://{tmp_path}/rdv",
           timeout=TIMEOUT)
    result = json.load(open(tmp_path / "one_rank0.json"))
    assert result == {"world": 1, "env_step": 256}
