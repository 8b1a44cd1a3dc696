"""What a config's env and collection ask of the machine, refused at compile time with an estimate (issue 34:
``env.n_evaluator_episode=1000000000`` never ended its first evaluation, ``env.collector_env_num=100000`` was
accepted): the bounds' edges, the machine's limits patched, and every dizoo config still compiling."""
from __future__ import annotations

import glob
import os

import pytest

import data.envs as envs
import policies.defaults as defaults
from data.envs import MAX_EVAL_EPISODES, WORKER_BYTES, check_env_section, episode_limit
from engine.config import ConfigError
from policies.defaults import check_collection

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cfg(**env):
    return {"env": dict(dict(env_id="CartPole-v1", collector_env_num=8, evaluator_env_num=5, n_evaluator_episode=5,
                             manager=dict(type="sync")), **env),
            "policy": {"collect": {"n_sample": 64}, "nstep": 3, "discount_factor": 0.99,
                       "other": {"replay_buffer": {"replay_buffer_size": 1000}},
                       "eval": {"evaluator": {"eval_freq": 100}}}}


def test_episode_limit_from_the_config_then_gymnasiums_registration():
    assert episode_limit({"env_id": "CartPole-v1"}) == 500
    assert episode_limit({"env_id": "CartPole-v1", "max_episode_steps": 20}) == 20
    assert episode_limit({"env_id": "CartPole-v1", "env_kwargs": {"max_episode_steps": 30}}) == 30
    assert episode_limit({"env_id": "NoSuchEnv-v0"}) is None and episode_limit({}) is None


def test_evaluation_episodes_up_to_the_bound():
    check_env_section(_cfg(n_evaluator_episode=MAX_EVAL_EPISODES))
    with pytest.raises(ConfigError, match=r"env.n_evaluator_episode=10001: every evaluation would play 10,001 "
                                          r"episodes \(2,001 on each of the 5 evaluator envs, up to 5,000,500 env steps "
                                          r"of episodes of up to 500\), and one comes every 100 train iterations"):
        check_env_section(_cfg(n_evaluator_episode=MAX_EVAL_EPISODES + 1))


def test_async_workers_against_the_machines_processes_files_and_memory(monkeypatch):
    monkeypatch.setattr(envs, "process_limit", lambda: 100)
    monkeypatch.setattr(envs, "open_file_limit", lambda: 1000)
    monkeypatch.setattr(envs, "host_memory_bytes", lambda: 50 * WORKER_BYTES)
    check_env_section(_cfg(collector_env_num=50, manager=dict(type="async")))
    check_env_section(_cfg(collector_env_num=10**6))  # sync: every env in this process, no worker
    check_env_section(_cfg(collector_env_num=10**6, manager=dict(type="async")), processes=False)  # its own threads
    with pytest.raises(ConfigError, match=r"env.collector_env_num=51 with env.manager.type='subprocess' starts one "
                                          r"process per env: at least 0.20 GiB of host memory \(4 MiB a worker at the "
                                          r"least\), more than this machine's 0.20 GiB. Give env.collector_env_num <= "
                                          r"50 "):
        check_env_section(_cfg(collector_env_num=51, manager=dict(type="subprocess")))
    monkeypatch.setattr(envs, "host_memory_bytes", lambda: None)  # a platform that does not say: not refused
    with pytest.raises(ConfigError, match=r"more processes than this user may run \(100: .*more than this process's "
                                          r"1,000 open files \(ulimit -n\).*<= 100 "):
        check_env_section(_cfg(collector_env_num=1001, manager=dict(type="async")))


def test_collector_envs_against_one_collect_and_the_replay_buffer():
    check_collection(_cfg(collector_env_num=1000), "off_policy")  # one vector step fills the buffer exactly
    with pytest.raises(ConfigError, match=r"env.collector_env_num=1001: .*replay_buffer_size=1,000\).*<= 1,000 "):
        check_collection(_cfg(collector_env_num=1001), "off_policy")
    check_collection(_cfg(collector_env_num=64), "on_policy")
    with pytest.raises(ConfigError, match=r"env.collector_env_num=65 is more than policy.collect.n_sample=64"):
        check_collection(_cfg(collector_env_num=65), "on_policy")
    check_collection(_cfg(collector_env_num=10**6), "offline")  # no collector


def test_a_collect_against_the_machines_memory(monkeypatch):
    cfg = _cfg()
    cfg["policy"]["model"] = {"obs_shape": [4, 84, 84]}
    monkeypatch.setattr(defaults, "host_memory_bytes", lambda: 4 * 2**20)
    with pytest.raises(ConfigError, match=r"env.collector_env_num=8 with policy.collect.n_sample=64: one collect holds "
                                          r"the observations of 8 envs x 8 steps and 2 steps each waiting for their "
                                          r"n-step windows \(policy.model.obs_shape=\[4, 84, 84\]\), at least "
                                          r"0.01 GiB.*Give policy.collect.n_sample <= about 37$"):
        check_collection(cfg, "off_policy")
    monkeypatch.setattr(defaults, "host_memory_bytes", lambda: 2**30)
    cfg["env"]["collector_env_num"], cfg["policy"]["collect"]["n_sample"], cfg["policy"]["nstep"] = 1000, 1000, 255
    with pytest.raises(ConfigError, match=r"Give env.collector_env_num <= 6\d$"):  # each env's n-step carry
        check_collection(cfg, "off_policy")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "dizoo", "**", "*_config.py"), recursive=True)),
                         ids=lambda p: os.path.basename(p))
def test_every_dizoo_config_fits(path, tmp_path, monkeypatch):
    """None of the shipped configs is refused by the new bounds (on a machine of 4 GiB)."""
    from commands.config_file import load_config_file
    from engine import compile_config
    monkeypatch.setattr(defaults, "host_memory_bytes", lambda: 4 * 2**30)
    monkeypatch.chdir(tmp_path)
    try:
        main, create = load_config_file(path)
    except (ImportError, ValueError) as err:  # an extra not installed, a removed config
        pytest.skip(str(err))
    compile_config(main, create, save=False)


def test_the_evaluator_makes_no_more_envs_than_an_evaluation_has_episodes(monkeypatch, tmp_path):
    """``env.evaluator_env_num=100000`` made 100,000 envs for an evaluation of 5 episodes (issue 34): an env
    with no episode of its own to play is not made (``EnvParams.evaluator_envs``)."""
    import pipelines.assembly as assembly
    from commands.cli import main

    assert envs.EnvParams(evaluator_env_num=100_000, n_evaluator_episode=5).evaluator_envs == 5
    assert envs.EnvParams(evaluator_env_num=3, n_evaluator_episode=5).evaluator_envs == 3
    made, real = [], assembly.make_vector_env
    monkeypatch.setattr(assembly, "make_vector_env", lambda env_type, cfg, n, *a, **k: made.append(n) or
                        real(env_type, cfg, n, *a, **k))
    config = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
    assert main(["train", "-c", config, "--max-env-step", "64", "--no-progress", "--exp-name", str(tmp_path / "r"),
                 "env.evaluator_env_num=100000", "env.n_evaluator_episode=2",
                 "policy.eval.evaluator.background=false"]) == 0
    assert made == [2]
