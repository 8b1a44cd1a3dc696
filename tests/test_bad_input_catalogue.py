"""A catalogue of bad input through every user-facing path: config values, config files and the command
line, the launcher's environment, and the Python API. Each must fail with an error that names what is
wrong (key, value, file, env or rank) and, where there is one, the fix; never a crash deep inside a run."""
from __future__ import annotations

import copy
import os

import pytest

from engine import ConfigError, compile_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARTPOLE_DQN = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
PENDULUM_SAC = os.path.join(ROOT, "dizoo", "classic_control", "pendulum", "config", "pendulum_sac_config.py")
CARTPOLE_DQN_TORCH = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_torch_config.py")


def _deep_set(main, sections):
    """``main`` with ``{"policy.learn.batch_size": 0}``-style keys set, sections created as needed."""
    for path, value in sections.items():
        node = main
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return main


def _cfg(config="cartpole_dqn", **sections):
    """A dizoo config with ``sections`` deep-set (``{"policy.learn.batch_size": 0}``), compiled unsaved."""
    from commands.config_file import load_config_file
    family = {"cartpole": "classic_control/cartpole", "pendulum": "classic_control/pendulum"}[config.split("_")[0]]
    main, create = load_config_file(os.path.join(ROOT, "dizoo", *family.split("/"), "config", f"{config}_config.py"))
    return compile_config(_deep_set(copy.deepcopy(main), sections), create, save=False)


def _value(path, value, config="cartpole_dqn"):
    return lambda tmp: _cfg(config, **{path: value})


CONFIG_VALUES = [
    ("misspelt key", _value("policy.learn.learning_rte", 0.1), ConfigError, r"did you mean 'policy.learn.learning_rate'"),
    ("wrong type", _value("policy.learn.batch_size", "64"), ConfigError, r"'policy.learn.batch_size' expects int.*got str"),
    ("NaN value", _value("policy.learn.learning_rate", float("nan")), ConfigError, r"'policy.learn.learning_rate' is NaN"),
    ("learning rate 0", _value("policy.learn.learning_rate", 0.0), ConfigError, r"learning_rate' is 0.0.*train nothing"),
    ("negative SAC rate", _value("policy.learn.learning_rate_q", -1e-3, "pendulum_sac"), ConfigError, r"learning_rate_q"),
    ("batch 0", _value("policy.learn.batch_size", 0), ConfigError, r"'policy.learn.batch_size' is 0: it must be at least 1"),
    ("no updates", _value("policy.learn.update_per_collect", 0), ConfigError, r"update_per_collect' is 0.*train nothing"),
    ("target period 0", _value("policy.learn.target_update_freq", 0), ConfigError, r"target_update_freq' is 0"),
    ("no epochs", _value("policy.learn.epoch_per_collect", 0, "cartpole_ppo"), ConfigError, r"epoch_per_collect' is 0"),
    ("no collector envs", _value("env.collector_env_num", 0), ConfigError, r"'env.collector_env_num' is 0"),
    ("no evaluator envs", _value("env.evaluator_env_num", 0), ConfigError, r"'env.evaluator_env_num' is 0"),
    ("no eval episodes", _value("env.n_evaluator_episode", 0), ConfigError, r"n_evaluator_episode' is 0"),
    ("no samples", _value("policy.collect.n_sample", 0), ConfigError, r"'policy.collect.n_sample' is 0"),
    ("nstep 0", _value("policy.nstep", 0), ConfigError, r"'policy.nstep' is 0"),
    ("negative layer width", _value("policy.model.encoder_hidden_size_list", [-5, 64]), ConfigError,
     r"'policy.model.encoder_hidden_size_list' is \[-5, 64\]: each layer's width must be a whole number >= 1"),
    ("zero layer width", _value("policy.model.encoder_hidden_size_list", [0]), ConfigError, r"\(not 0\)"),
    ("epsilon above 1", _value("policy.other.eps.start", 2.0), ConfigError,
     r"'policy.other.eps.start' is 2.0: it must lie in \[0, 1\]"),
    ("epsilon -inf", _value("policy.other.eps.end", float("-inf")), ConfigError,
     r"'policy.other.eps.end' is -inf: it must lie in \[0, 1\]"),
    ("eval_freq 0", _value("policy.eval.evaluator.eval_freq", 0), ConfigError, r"eval_freq' is 0"),
    ("background eval not a bool", _value("policy.eval.evaluator.background", "yes"), ConfigError,
     r"'policy.eval.evaluator.background' expects bool.*got str"),
    ("a word where a None default declares a number", _value("policy.learn.target_entropy", "auto", "pendulum_sac"),
     ConfigError, r"'policy.learn.target_entropy' expects Optional\[float\] \(default None\), got str: 'auto'"),
    ("a fraction where a None default declares a count", _value("env.max_episode_steps", 99.5), ConfigError,
     r"'env.max_episode_steps' expects Optional\[int\] \(default None\), got float: 99.5"),
    ("a negative episode limit", _value("env.max_episode_steps", -3), ConfigError,
     r"'env.max_episode_steps' is -3: it must be at least 1"),
    ("an episode limit of 0", _value("env.max_episode_steps", 0), ConfigError, r"'env.max_episode_steps' is 0"),
    ("buffer below batch", _value("policy.other.replay_buffer.replay_buffer_size", 32), ConfigError,
     r"replay_buffer_size=32 is smaller than policy.learn.batch_size=64.*never start"),
    ("discount above 1", _value("policy.discount_factor", 1.5), ConfigError, r"discount_factor' is 1.5.*\[0, 1\]"),
    ("lambda above 1", _value("policy.collect.gae_lambda", 2.0, "cartpole_ppo"), ConfigError, r"gae_lambda"),
    ("negative save_freq", _value("ckpt.save_freq", -1), ConfigError, r"'ckpt.save_freq' is -1: it must be >= 0"),
    ("unknown backend", _value("ddp.backend", "mpi"), ConfigError, r"ddp.backend='mpi' is not one of 'auto', 'nccl', 'gloo'"),
    ("unknown compile mode", _value("policy.compile", "cudagraphs"), ConfigError,
     r"policy.compile='cudagraphs' is not one of.*did you mean 'cudagraph'"),
    ("unknown amp", _value("policy.amp", "fp16"), ConfigError, r"policy.amp='fp16' is not one of 'none', 'bf16'"),
    ("C51 support empty", _value("policy.model.v_min", 200.0, "cartpole_rainbow"), ConfigError,
     r"v_min=200.0 must be below policy.model.v_max=100.0"),
    ("one atom", _value("policy.model.n_atoms", 1, "cartpole_rainbow"), ConfigError,
     r"n_atoms=1: a categorical head needs at least 2 atoms"),
    ("noisy with epsilon", _value("policy.other.eps.start", 0.5, "cartpole_rainbow"), ConfigError,
     r"noisy=True explores through its noisy layers.*policy.other.eps.start=0"),
    ("unknown distribution", _value("policy.model.distribution", "categorial", "cartpole_rainbow"), ConfigError,
     r"distribution='categorial' is not one of.*did you mean 'categorical'"),
    ("recurrent keys on a replay policy", _value("policy.model.rnn_type", "lstm"), ConfigError,
     r"policy.model.rnn_type asks for a recurrent policy, but policy 'dqn' is not recurrent \(it learns from single "
     r"transitions sampled from a replay buffer.*policy.type='ppo_lstm'"),
    ("sequence longer than the rollout", _value("policy.learn.seq_len", 128, "cartpole_masked_ppo_lstm"), ConfigError,
     r"seq_len=128 does not divide the 64 steps per env.*cannot be longer than the rollout"),
    ("sequence not dividing the rollout", _value("policy.learn.seq_len", 24, "cartpole_masked_ppo_lstm"), ConfigError,
     r"seq_len=24 does not divide the 64 steps per env.*multiple of seq_len \* collector_env_num \(192\)"),
    ("minibatch of part sequences", _value("policy.learn.batch_size", 100, "cartpole_masked_ppo_lstm"), ConfigError,
     r"batch_size=100 is not a whole number of sequences of policy.learn.seq_len=16.*\(e.g. 96\)"),
    ("unknown recurrent layer", _value("policy.model.rnn_type", "transformer", "cartpole_masked_ppo_lstm"),
     ConfigError, r"rnn_type='transformer' is not one of 'lstm', 'gru'"),
    ("empty exp_name", _value("exp_name", ""), ConfigError, r"exp_name must be a non-empty path"),
    # values that allocate or loop: refused with an estimate before anything starts (issue 34)
    ("n-step window of a billion steps", _value("policy.nstep", 1_000_000_000), ConfigError,
     r"policy.nstep=1000000000: the n-step builder would carry 999,999,999 steps of each of the 8 collector envs.*"
     r"255 steps is the longest window.*CartPole-v1's episodes end by step 500.*Give policy.nstep <= 255 "),
    ("n-step window past the episode", lambda tmp: _cfg(**{"policy.nstep": 100, "env.max_episode_steps": 50}),
     ConfigError, r"episodes end by step 50 \(its time limit\), so a longer window gives the same transitions as "
                  r"policy.nstep=50\. Give policy.nstep <= 50 "),
    ("n-step window past the discount's horizon",
     lambda tmp: _cfg(**{"policy.nstep": 200, "policy.discount_factor": 0.9}), ConfigError,
     r"policy.discount_factor=0.9 a reward 158 or more steps into the window is weighted gamma\^k < 2\^-24.*"
     r"Give policy.nstep <= 158 "),
    ("a billion evaluation episodes", _value("env.n_evaluator_episode", 1_000_000_000), ConfigError,
     r"env.n_evaluator_episode=1000000000: every evaluation would play 1,000,000,000 episodes \(200,000,000 on each "
     r"of the 5 evaluator envs, up to 500,000,000,000 env steps.*Give env.n_evaluator_episode <= 10,000"),
    ("collector envs beyond the replay buffer", _value("env.collector_env_num", 200_000), ConfigError,
     r"env.collector_env_num=200000: one collect steps every env at least once, 200,000 transitions "
     r"\(policy.collect.n_sample=64 .*replay_buffer_size=100,000\).*Give env.collector_env_num <= 100,000"),
    ("collector envs beyond the rollout", _value("env.collector_env_num", 512, "cartpole_ppo"), ConfigError,
     r"env.collector_env_num=512 is more than policy.collect.n_sample=256: .*one step of all 512 envs.*"
     r"Give policy.collect.n_sample >= 512"),
    ("env processes beyond the machine",
     lambda tmp: _cfg(**{"env.collector_env_num": 10_000_000, "env.manager.type": "async"}), ConfigError,
     r"env.collector_env_num=10000000 with env.manager.type='async' starts one process per env: more processes than "
     r"this user may run.*Give env.collector_env_num <= [\d,]+ .*or env.manager.type='sync'"),
    ("a collect beyond the machine's memory",
     lambda tmp: _cfg(**{"policy.collect.n_sample": 10**9, "policy.model.obs_shape": [4, 84, 84]}), ConfigError,
     r"env.collector_env_num=8 with policy.collect.n_sample=1000000000: one collect holds the observations of 8 envs "
     r"x 125,000,000 steps .*at least [\d,.]+ GiB of host memory, more than this machine's .*"
     r"Give policy.collect.n_sample <= about [\d,]+"),
    ("unknown policy type", lambda tmp: compile_config({}, dict(env=dict(type="cartpole"), policy=dict(type="dqm")),
                                                       save=False), KeyError, r"unknown policy type 'dqm'.*dqn"),
    ("unknown env type", lambda tmp: compile_config({}, dict(env=dict(type="cartpol"), policy=dict(type="dqn")),
                                                    save=False), KeyError, r"unknown env type 'cartpol'.*cartpole"),
    ("missing policy type", lambda tmp: compile_config({}, dict(env=dict(type="cartpole")), save=False), ConfigError,
     r"create_config.policy.type is missing"),
    ("unknown create section", lambda tmp: compile_config({}, dict(env=dict(type="cartpole"), policy=dict(type="dqn"),
                                                                   learner=dict()), save=False),
     ConfigError, r"unknown config key 'create_config.learner'"),
]


def _train(tmp, config=CARTPOLE_DQN, **sections):
    from pipelines import serial_pipeline
    from commands.config_file import load_config_file
    main, create = load_config_file(config)
    main = copy.deepcopy(main)
    main.exp_name, main.log = str(tmp / "exp"), dict(progress=False)
    return serial_pipeline((_deep_set(main, sections), create), max_env_step=64)


def _nan_env(tmp):
    import gymnasium as gym
    from data.envs import GymEnvType
    from engine.registry import ENV_REGISTRY

    class NaNReward(gym.Wrapper):
        def step(self, action):
            obs, _, term, trunc, info = self.env.step(action)
            return obs, float("nan"), term, trunc, info

    if "BatonNaN-v0" not in gym.registry:
        gym.register("BatonNaN-v0", entry_point=lambda: NaNReward(gym.make("CartPole-v1")))
        ENV_REGISTRY.register("nan_cartpole", GymEnvType("BatonNaN-v0", stop_value=1e9))
    from pipelines import serial_pipeline
    return serial_pipeline((dict(exp_name=str(tmp / "exp"), log=dict(progress=False)),
                            dict(env=dict(type="nan_cartpole"), policy=dict(type="dqn"))), max_env_step=64)


RUNS = [
    ("unknown gym id", lambda tmp: _train(tmp, **{"env.env_id": "CartPol-v1"}), ValueError,
     r"env.env_id='CartPol-v1' is not a registered gymnasium env id. Did you mean 'CartPole-v1'"),
    ("model shape vs env", lambda tmp: _train(tmp, **{"policy.model.obs_shape": 5}), ValueError,
     r"env 'CartPole-v1'.*obs_shape=5.*expected \(4,\)"),
    ("discrete algo on continuous env", lambda tmp: _cfg_and_policy(tmp, "pendulum_sac", "dqn"), ValueError,
     r"'dqn' needs a discrete action space.*use a continuous-action policy"),
    ("continuous algo on discrete env", lambda tmp: _algo_env("td3", "CartPole-v1"), ValueError,
     r"--algo td3 does not fit --env CartPole-v1.*'td3' needs a continuous \(Box\).*use a discrete-action policy "
     r"such as 'dqn' or 'ppo'.*Algorithms that fit: a2c, bc, cql, dqn, ppo"),
    ("device string", lambda tmp: _train(tmp, **{"policy.device.collect": "gpu1"}), ValueError,
     r"policy.device.collect='gpu1' is not a device torch knows here; use 'cpu', 'cuda' or 'cuda:N'"),
    ("device env on a GPU this process lacks", lambda tmp: _train(tmp, CARTPOLE_DQN_TORCH, **{"env.device": "cuda:9"}),
     ValueError, r"env.device='cuda:9': this process sees \d+ GPUs?"),
    ("device env in overlapped groups", lambda tmp: _train(tmp, CARTPOLE_DQN_TORCH, **{"env.manager.overlap": True}),
     ValueError, r"env.manager.overlap does not apply to env type 'cartpole_torch'.*set env.manager.overlap=False"),
    ("NaN rewards from the env", _nan_env, ValueError, r"env \d returned a non-finite reward \(nan\)"),
    ("resume without a run", lambda tmp: _resume_nothing(tmp), ValueError,
     r"--resume: no run to continue at .*exp_seed0 \(nor .*exp_seed0_<n>\)"),
    ("resume a directory without checkpoint", lambda tmp: _resume_nothing(tmp, make_dir=True), RuntimeError,
     r"no checkpoint to resume from in .*exp/ckpt"),
    ("run directory holds a run", lambda tmp: _run_twice(tmp), ValueError,
     r"exp already holds a run \(ckpt, config.json.*\): --resume to continue it, --force to start over"),
    ("resume and force together", lambda tmp: _resume_nothing(tmp, force=True), ValueError,
     r"--resume continues a run and --force starts it over: give one of them"),
]


def _algo_env(algo, env_id):
    from commands.algo_env import build_config
    return build_config(algo, env_id)


def _cfg_and_policy(tmp, config, policy_type):
    from pipelines import serial_pipeline
    from commands.config_file import load_config_file
    main, _ = load_config_file(os.path.join(ROOT, "dizoo", "classic_control", "pendulum", "config",
                                            f"{config}_config.py"))
    main = copy.deepcopy(main)
    main.log = dict(progress=False)
    return serial_pipeline(({k: v for k, v in main.items() if k != "policy"} | {"exp_name": str(tmp / "exp")},
                            dict(env=dict(type="pendulum"), policy=dict(type=policy_type))), max_env_step=8)


def _resume_nothing(tmp, make_dir=False, force=False):
    from pipelines import serial_pipeline
    from commands.config_file import load_config_file
    main, create = load_config_file(CARTPOLE_DQN)
    if make_dir:  # a run directory that exists, named explicitly, but holds no checkpoint
        os.makedirs(tmp / "exp" / "log")
        return serial_pipeline((main, create), exp_name=str(tmp / "exp"), resume=True)
    return serial_pipeline((dict(copy.deepcopy(main), exp_name=str(tmp / "exp")), create), resume=True, force=force)


def _run_twice(tmp):
    from pipelines import serial_pipeline
    from commands.config_file import load_config_file
    main, create = load_config_file(CARTPOLE_DQN)
    main = dict(copy.deepcopy(main), log=dict(progress=False))
    serial_pipeline((main, create), exp_name=str(tmp / "exp"), max_env_step=64)
    return serial_pipeline((main, create), exp_name=str(tmp / "exp"), max_env_step=64)


@pytest.mark.parametrize("name,make,error,message", CONFIG_VALUES + RUNS, ids=[c[0] for c in CONFIG_VALUES + RUNS])
def test_bad_config_or_run_is_named(name, make, error, message, tmp_path, monkeypatch):
    from commands.user_errors import USER_ERRORS

    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=message) as raised:
        make(tmp_path)
    # a user error: the command line prints it as one baton: line (any other class would be a traceback there)
    assert isinstance(raised.value, USER_ERRORS), type(raised.value)


def _write(tmp, name, text):
    path = tmp / name
    path.write_text(text)
    return str(path)


CLI = [
    ("config not found", lambda tmp: ["train", "-c", str(tmp / "nope.py")], r"config file not found: .*nope.py"),
    ("removed _ddp_ config", lambda tmp: ["train", "-c", PENDULUM_SAC.replace("_config.py", "_ddp_config.py")],
     r"config file .*pendulum_sac_ddp_config.py was removed: it differed from .*pendulum_sac_config.py in its name "
     r"only, and every config runs data-parallel as it is: baton train -c .*pendulum_sac_config.py --nproc 2"),
    ("YAML config", lambda tmp: ["train", "-c", _write(tmp, "c.yaml", "env: {}\n")],
     r"a config is a Python file defining main_config and create_config.*\.yaml files are not read"),
    ("config syntax error", lambda tmp: ["train", "-c", _write(tmp, "c.py", "main_config = dict(\n")],
     r"c.py, line \d+: .*a config is Python"),
    ("config that exits", lambda tmp: ["train", "-c", _write(tmp, "c.py", "import sys\nsys.exit(0)\n")],
     r"config file .*c.py exits while it is read \(sys.exit\(0\)\): a config defines main_config"),
    ("config without create_config", lambda tmp: ["train", "-c", _write(tmp, "c.py", "main_config = {}\n")],
     r"does not define create_config"),
    ("node rank too high", lambda tmp: ["train", "-c", CARTPOLE_DQN, "--nnodes", "2", "--node-rank", "3",
                                        "--rendezvous", f"file://{tmp}/r"], r"--node-rank 3 is not in 0\.\.1"),
    ("nodes with nowhere to meet", lambda tmp: ["train", "-c", CARTPOLE_DQN, "--nnodes", "2"],
     r"needs where the nodes meet"),
    ("rendezvous dir missing", lambda tmp: ["train", "-c", CARTPOLE_DQN, "--rendezvous", f"file://{tmp}/no/dir/r"],
     r"the directory .*no/dir does not exist"),
    ("gpus and nproc", lambda tmp: ["train", "-c", CARTPOLE_DQN, "--gpus", "1", "--nproc", "2"], r"give one of them"),
    ("nproc 0", lambda tmp: ["train", "-c", CARTPOLE_DQN, "--nproc", "0"], r"--nproc 0: give at least 1 process"),
    ("check-ddp alone", lambda tmp: ["check-ddp", "-c", CARTPOLE_DQN, "--nproc", "1"], r"at least 2 processes"),
    ("unknown subcommand", lambda tmp: ["trian", "-c", CARTPOLE_DQN], r"invalid choice: 'trian'"),
    ("misspelt option", lambda tmp: ["train", "-c", CARTPOLE_DQN, "--nprocs", "2"],
     r"unrecognized arguments: --nprocs; did you mean --nproc\?"),
    ("negative seed", lambda tmp: ["train", "-c", CARTPOLE_DQN, "--seed", "-5", "--exp-name", str(tmp / "r")],
     r"baton: seed=-5: a seed is a whole number >= 0 .*give --seed N or seed=N with N >= 0"),
    ("learning rate 1e308", lambda tmp: ["train", "-c", CARTPOLE_DQN, "policy.learn.learning_rate=1e308",
                                         "--max-env-step", "3000", "--no-progress", "--exp-name", str(tmp / "r")],
     r"baton: dqn loss is (nan|inf|-inf) at update \d+; .*Lower policy.learn.learning_rate"),
    ("replay beyond the machine", lambda tmp: ["train", "-c", CARTPOLE_DQN, "--no-progress", "--max-env-step", "3000",
                                               "policy.other.replay_buffer.replay_buffer_size=1000000000000000",
                                               "--exp-name", str(tmp / "r")],
     r"baton: the replay storage \(1,000,000,000,000,000 transitions\) needs .* of host memory once full, more than "
     r"this machine's .* GiB. Make policy.other.replay_buffer.replay_buffer_size smaller \(about [\d,]+ transitions"),
    ("negative seed override", lambda tmp: ["train", "-c", CARTPOLE_DQN, "seed=-1", "--exp-name", str(tmp / "r")],
     r"baton: seed=-1: a seed is a whole number >= 0"),
    ("env module that does not import", lambda tmp: ["train", "--algo", "dqn", "--env", "no_such_module:MyEnv-v0"],
     r"baton: --env='no_such_module:MyEnv-v0': cannot import the module 'no_such_module' that registers 'MyEnv-v0'"
     r".*PYTHONPATH"),
    ("n-step of a billion", lambda tmp: ["train", "-c", CARTPOLE_DQN, "policy.nstep=1000000000",
                                         "--exp-name", str(tmp / "r")],
     r"^baton: policy.nstep=1000000000: the n-step builder would carry 999,999,999 steps .*Give policy.nstep <= 255 "),
    ("a billion evaluation episodes", lambda tmp: ["train", "-c", CARTPOLE_DQN, "env.n_evaluator_episode=1000000000",
                                                   "--exp-name", str(tmp / "r")],
     r"^baton: env.n_evaluator_episode=1000000000: every evaluation would play 1,000,000,000 episodes .*"
     r"Give env.n_evaluator_episode <= 10,000"),
    ("200,000 collector envs", lambda tmp: ["train", "-c", CARTPOLE_DQN, "env.collector_env_num=200000",
                                            "--exp-name", str(tmp / "r")],
     r"^baton: env.collector_env_num=200000: one collect steps every env at least once, 200,000 transitions .*"
     r"Give env.collector_env_num <= 100,000"),
    ("eval of a billion episodes", lambda tmp: ["eval", str(tmp), "--episodes", "1000000000"],
     r"^baton: --episodes 1,000,000,000: one evaluation of more than 1,000,000 episodes would run for days .*"
     r"Give --episodes <= 1,000,000"),
    ("eval on 100,000 envs", lambda tmp: ["eval", str(tmp), "--episodes", "100000", "--num-envs", "100000"],
     r"^baton: --num-envs 100,000: this process would make and step 100,000 envs; give --num-envs <= 10,000"),
    ("tune n-step up to 1e23", lambda tmp: ["tune", "-c", CARTPOLE_DQN, "--trials", "1", "--max-env-step", "64",
                                            "--study-dir", str(tmp / "study"),
                                            "policy.nstep=int(1,99999999999999999999999)"],
     r"^baton: policy.nstep=int\(1,99999999999999999999999\): the config refuses 99999999999999999999999: "
     r"policy.nstep=99999999999999999999999: .*Give policy.nstep <= 255 "),
]


@pytest.mark.parametrize("name,argv,message", CLI, ids=[c[0] for c in CLI])
def test_bad_command_line_is_named(name, argv, message, tmp_path, capsys):
    from commands.cli import main
    try:
        code = main(argv(tmp_path))
    except SystemExit as exit_info:
        code = exit_info.code
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert __import__("re").search(message, err, __import__("re").MULTILINE), err
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert not lines[0].startswith("baton:") or len(lines) == 1, err  # a baton: error is one line (argparse: two)


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# what srun gives task `rank` of a step of `tasks` tasks on one node, meeting at `host` (MASTER_PORT: a free port)
def _srun_task(rank, tasks, host="127.0.0.1", **more):
    return dict(dict(SLURM_PROCID=str(rank), SLURM_NTASKS=str(tasks), SLURM_LOCALID=str(rank), SLURM_NODEID="0",
                     SLURM_NNODES="1", SLURM_NTASKS_PER_NODE=str(tasks), SLURM_JOB_NODELIST=host, SLURM_JOB_ID="4242"),
                **more)


#: the launcher's environment (Slurm's variables) through ``baton train``: (name, variables, message, exit
#: status). 2: what the variables of this process show wrong alone; 1: ranks that never met (issue 34: a
#: traceback after the timeout), which one process cannot tell from a peer that failed to start
LAUNCH_ENV = [
    ("Slurm task count beyond any job", lambda: _srun_task(0, 2, SLURM_NTASKS="100000000000000000000", SLURM_NNODES=""),
     r"^baton: SLURM_NTASKS=100000000000000000000 is more than any job holds \(at most 2,147,483,647", 2),
    ("Slurm non-ASCII host name", lambda: _srun_task(0, 2, "n\u0153ud01"),
     r"^baton: SLURM_JOB_NODELIST='n\u0153ud01' holds '\u0153' \(U\+0153\), which is not ASCII", 2),
    ("Slurm rank alone of its 2 tasks", lambda: _srun_task(0, 2, MASTER_PORT=str(_free_port())),
     r"^baton: rank 0 of 2: only 1 of 2 processes arrived within 2 s\. .*The ranks came from Slurm's variables", 1),
    ("Slurm step of 4 tasks whose rank 0 never comes", lambda: _srun_task(1, 2, SLURM_STEP_NUM_TASKS="4",
                                                                           SLURM_STEP_TASKS_PER_NODE="4",
                                                                           MASTER_PORT=str(_free_port())),
     r"^baton: rank 1 of 4 could not reach rank 0 at 127\.0\.0\.1:\d+ within 2 s: nothing accepted a connection", 1),
    ("Slurm master that does not resolve", lambda: _srun_task(1, 2, "no-such-host.invalid", MASTER_PORT="29400"),
     r"^baton: rank 1 of 2 could not reach rank 0 at no-such-host\.invalid:29400 within 2 s: the host name "
     r"'no-such-host\.invalid' does not resolve", 1),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name,variables,message,code", LAUNCH_ENV, ids=[c[0] for c in LAUNCH_ENV])
def test_bad_launch_environment_is_one_line(name, variables, message, code, tmp_path, monkeypatch, capsys):
    import engine.slurm
    from commands.cli import main
    for var in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                "TORCHELASTIC_RUN_ID"):  # set, then deleted: restored as absent, whatever adopting the layout sets
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setattr(engine.slurm, "_adopted", None)
    monkeypatch.setenv("BATON_DDP_TIMEOUT", "2")
    for var, value in variables().items():
        monkeypatch.setenv(var, value)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "-c", CARTPOLE_DQN, "--max-env-step", "64", "--no-progress", "--exp-name", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert exit_info.value.code == code and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and __import__("re").search(message, err), err


def test_launcher_environment_without_master_names_what_is_missing(monkeypatch):
    from engine.distributed import DDPContext, DistributedError
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(DistributedError, match="rank 1 of 2: MASTER_ADDR, MASTER_PORT not set"):
        with DDPContext():
            pass


def test_launch_options_under_torchrun_are_refused(monkeypatch, capsys):
    from commands.cli import main
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit):
        main(["train", "-c", CARTPOLE_DQN, "--nproc", "2"])
    assert "leave them out under torchrun" in capsys.readouterr().err


def test_python_api_misuse_is_named():
    from dataclasses import dataclass

    from data.replay import ReplayBuffer
    from engine import OnlineRLContext, Task, persistent
    from middleware import OffPolicyLearner, StepCollector
    from pipelines import Pipeline, StageError

    pipeline = Pipeline(OnlineRLContext())
    pipeline.append(lambda ctx: None, name="collector")
    with pytest.raises(StageError, match="no stage named 'colector'.*Did you mean 'collector'"):
        pipeline.insert_after("colector", lambda ctx: None)
    with pytest.raises(TypeError, match="stage 'x': a middleware must be callable"):
        pipeline.append(42, name="x")
    with pytest.raises(ValueError, match="unknown sync rule 'total'"):
        @dataclass
        class Bad(OnlineRLContext):
            n: int = persistent(0, sync="total")
    with pytest.raises(TypeError, match="collector's policy must be a CollectPolicy.*lacks: forward"):
        StepCollector(object(), None, n_sample=8)
    with pytest.raises(TypeError, match="learner's replay buffer must be a ReplayBuffer"):
        OffPolicyLearner(type("P", (), {"forward": 0, "model": 0, "state_dict": 0, "load_state_dict": 0})(), [],
                         batch_size=4, update_per_collect=1)
    with pytest.raises(TypeError, match="sampler must be a data.replay.Sampler"):
        ReplayBuffer(8, sampler="uniform")
    with pytest.raises(ValueError, match="max_step must be a non-negative int"):
        task = Task()
        with task.start(ctx=OnlineRLContext()):
            task.run(max_step=-1)


def test_catalogue_size():
    # the tables above, plus the two launcher-environment tests and the seven Python API misuses
    assert len(CONFIG_VALUES) + len(RUNS) + len(CLI) + len(LAUNCH_ENV) + 2 + 7 >= 100
