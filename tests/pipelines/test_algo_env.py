"""``baton train --algo ALGO --env ENV_ID``: a config from the policy's and env family's defaults."""
from __future__ import annotations

import json
import math
import re

import pytest

from pipelines import build_pipeline
from commands.algo_env import AlgoEnvError, algo_support, build_config
from commands.catalog import declared_action_spaces
from commands.cli import main


@pytest.mark.parametrize("algo", ["dqn", "rainbow"])
def test_dqn_on_cartpole_trains_without_a_config_file(tmp_path, monkeypatch, algo):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--algo", algo, "--env", "CartPole-v1", "--max-env-step", "128", "--no-progress",
                 "--exp-name", str(tmp_path / "r"), "policy.collect.n_sample=32", "env.evaluator_env_num=1",
                 "env.n_evaluator_episode=1"]) == 0
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert (config["env"]["type"], config["env"]["env_id"], config["policy"]["type"]) == ("cartpole", "CartPole-v1",
                                                                                         algo)
    assert config["env"]["stop_value"] == 475.0  # the cartpole family's own: gymnasium's threshold
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["env_step"] >= 128


@pytest.mark.parametrize("algo,env_id,env_type,obs_shape,action_shape", [
    ("ppo", "Pendulum-v1", "pendulum", [3], 1),
    ("sac", "MountainCarContinuous-v0", "gym", [2], 1),
    ("a2c", "Acrobot-v1", "gym", [6], 3),
    ("rainbow", "Acrobot-v1", "gym", [6], 3),
    ("ppo_lstm", "Pendulum-v1", "pendulum", [3], 1),
])
def test_algo_env_builds_a_model_sized_from_the_env(tmp_path, algo, env_id, env_type, obs_shape, action_shape):
    main_config, create_config = build_config(algo, env_id)
    assert main_config["exp_name"] == f"{algo}_{env_id}" and create_config["env"]["type"] == env_type
    main_config.update(exp_name=str(tmp_path / "r"), log=dict(progress=False))
    with build_pipeline((main_config, create_config)) as pipeline:
        model = pipeline.cfg.policy.model
        assert (model.obs_shape, model.action_shape) == (obs_shape, action_shape)


def test_generic_gym_env_takes_its_stop_value_from_the_spec():
    assert build_config("dqn", "Acrobot-v1")[0]["env"]["stop_value"] == -100.0      # reward_threshold
    assert build_config("ppo", "Pendulum-v1")[0]["env"] == {"env_id": "Pendulum-v1"}  # the family's own


def test_atari_ids_use_the_atari_family():
    pytest.importorskip("ale_py")
    main_config, create_config = build_config("dqn", "ALE/Pong-v5")
    assert create_config["env"]["type"] == "atari" and main_config["exp_name"] == "dqn_ALE_Pong-v5"
    assert "stop_value" not in main_config["env"]                                    # Pong's 20 stays
    assert build_config("ppo", "BreakoutNoFrameskip-v4")[0]["env"]["stop_value"] == math.inf


@pytest.mark.parametrize("argv,message", [
    (["--algo", "dqn", "--env", "Pendulum-v1"],
     r"--algo dqn does not fit --env Pendulum-v1 \(action space Box\(-2\.0, 2\.0, \(1,\), float32\)\).*"
     r"Algorithms that fit: a2c, bc, ddpg, ppo, ppo_lstm, sac, td3"),
    (["--algo", "dqm", "--env", "CartPole-v1"], r"--algo 'dqm' is not a registered algorithm; choose one of a2c, bc, cql, ddpg, dqn"),
    (["--algo", "dqn", "--env", "CartPol-v1"], r"--env 'CartPol-v1' is not a gymnasium id; did you mean CartPole-v1"),
    (["--algo", "dqn", "--env", "CartPole-v1", "policy.learn.batch_sz=3"], r"did you mean 'policy.learn.batch_size'"),
])
def test_bad_algo_or_env_is_one_line_exit_2(argv, message, capsys):
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("baton: ")
    assert re.search(message, err), err


@pytest.mark.parametrize("argv", [["--algo", "dqn"], ["--env", "CartPole-v1"], []])
def test_config_comes_from_exactly_one_place(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", *argv])
    assert exc.value.code == 2 and "give -c CONFIG" in capsys.readouterr().err


def test_list_commands_print_and_exit_0(capsys):
    assert main(["train", "--list-algos"]) == 0
    algos = capsys.readouterr().out
    assert algos.splitlines()[0].split() == ["algo", "discrete", "continuous", "agents", "pipeline"]
    assert "dqn       yes       no          one      off-policy" in algos and "sac       no        yes" in algos
    assert "mappo     yes       yes         several  on-policy" in algos
    assert main(["train", "--list-envs"]) == 0
    envs = capsys.readouterr().out
    assert "cartpole     CartPole-v1" in envs and "ALE/<Game>-v5" in envs and "Acrobot-v1" in envs


def test_algo_support_asks_the_policy():
    assert algo_support("ppo") == {"discrete": True, "continuous": True}
    assert algo_support("dqn") == {"discrete": True, "continuous": False}
    with pytest.raises(AlgoEnvError, match="Algorithms that fit: a2c, bc, cql, dqn, ppo"):
        build_config("sac", "CartPole-v1")


@pytest.mark.parametrize("algo,env_id", [("dqn", "Pendulum-v1"), ("sac", "CartPole-v1"),
                                         ("rainbow", "MountainCarContinuous-v0"), ("td3", "Acrobot-v1")])
def test_an_action_space_the_algo_does_not_declare_is_refused_before_torch_loads(algo, env_id):
    """The common mismatch is answered from the classes' declarations (commands.algo_fit), in a fraction of
    a second, and names the same algorithms that fit as the full check, which builds each policy."""
    import subprocess
    import sys

    code = (f"import sys; from commands.cli import main; status = main(['train', '--algo', {algo!r}, '--env', "
            f"{env_id!r}]); print('torch' in sys.modules, status)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "2"], done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"baton: --algo {algo} does not fit --env {env_id} (action space ")
    with pytest.raises(AlgoEnvError) as full:
        build_config(algo, env_id)
    # the full check asks this process's registry, where other tests may have registered algorithms of their
    # own (tests/policies/tiny_q.py); the quick one reads the installed entry points, as a fresh command does
    installed = set(declared_action_spaces())
    fit = [name for name in str(full.value).split("Algorithms that fit: ")[1].split(", ") if name in installed]
    assert line.split("Algorithms that fit: ")[1] == ", ".join(fit)


def test_envs_with_discrete_or_dict_observations_and_masks_make_configs():
    """Issue 31: a lone Discrete observation (FrozenLake) reaches the model as a key of a dict, and Taxi-v4's info
    mask joins its observation; both build with DQN and PPO (Taxi-v4 through its family, dizoo/toy_text)."""
    for env_id, env_type in (("FrozenLake-v1", "gym"), ("Taxi-v4", "taxi")):
        for algo in ("dqn", "rainbow", "ppo", "a2c"):
            main_config, create_config = build_config(algo, env_id)
            assert create_config["env"]["type"] == env_type and main_config["env"]["env_id"] == env_id


def test_an_id_without_an_episode_limit_gets_one_so_that_evaluations_end():
    """CliffWalking-v1 registers no time limit: the greedy policy of an evaluation walked in a circle and the run
    never ended. An id without one gets env.max_episode_steps (said in the log); one with a limit keeps its own."""
    from commands.algo_env import DEFAULT_EPISODE_LIMIT

    assert build_config("ppo", "CliffWalking-v1")[0]["env"]["max_episode_steps"] == DEFAULT_EPISODE_LIMIT
    assert "max_episode_steps" not in build_config("ppo", "Taxi-v4")[0]["env"]  # 200, its own
    assert "max_episode_steps" not in build_config("dqn", "Acrobot-v1")[0]["env"]


def test_a_multi_agent_task_takes_the_multi_agent_algorithms_and_refuses_the_others_by_name(tmp_path, monkeypatch):
    pytest.importorskip("mpe2")
    monkeypatch.chdir(tmp_path)
    main_cfg, create = build_config("mappo", "simple_spread_v3")
    assert create["env"]["type"] == "mpe" and main_cfg["env"]["env_id"] == "simple_spread_v3"
    assert main(["train", "--algo", "ippo", "--env", "simple_reference_v3", "--max-env-step", "200", "--no-progress",
                 "--exp-name", str(tmp_path / "r"), "policy.collect.n_sample=100", "env.collector_env_num=4",
                 "env.n_evaluator_episode=1"]) == 0
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["env_step"] >= 200
    with pytest.raises(AlgoEnvError, match=r"simple_spread_v3 has several agents in each env, which dqn does not "
                                           r"train.*Algorithms that fit: ippo, iql, mappo, qmix, vdn$"):
        build_config("dqn", "simple_spread_v3")
    with pytest.raises(AlgoEnvError, match=r"policy 'mappo' trains the agents of a multi-agent env.*Algorithms that "
                                           r"fit: a2c, .*dqn, ppo"):
        build_config("mappo", "CartPole-v1")


def test_a_config_of_a_single_agent_policy_on_a_multi_agent_env_says_so(tmp_path):
    """The config-file path words it as ``--algo`` does: the env has several agents, the policy trains one."""
    pytest.importorskip("mpe2")
    from policies.base import SpaceMismatchError

    main = dict(exp_name=str(tmp_path / "dqn_mpe"), log=dict(progress=False))
    with pytest.raises(SpaceMismatchError, match=r"env 'simple_spread_v3' \(type 'mpe'\) has several agents in each "
                                                 r"env, which policy 'dqn' does not train"):
        build_pipeline((main, dict(env=dict(type="mpe"), policy=dict(type="dqn"))), max_env_step=64)
