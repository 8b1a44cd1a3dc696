"""MAPPO and IPPO (issue 32, item 2, first piece): PPO over an agent axis on mpe2's Simple Spread through the
standard pipeline; the critic reads the global state (MAPPO) or the agent's own observation (IPPO); the agents'
spaces are checked by name."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

import dizoo.pettingzoo.envs  # noqa: E402,F401  (registers the mpe env type)
from pipelines import serial_pipeline  # noqa: E402
from policies.mappo import AgentsActorCritic, IPPOPolicy, MAPPOPolicy  # noqa: E402
from policies.spaces import SpaceMismatchError  # noqa: E402


def _config(algo, tmp_path):
    main = dict(exp_name=str(tmp_path / algo), log=dict(progress=False),
                env=dict(collector_env_num=4, evaluator_env_num=2, n_evaluator_episode=2, stop_value=float("inf")),
                policy=dict(collect=dict(n_sample=200), learn=dict(epoch_per_collect=2, batch_size=100),
                            eval=dict(evaluator=dict(eval_freq=1000))))
    return main, dict(env=dict(type="mpe"), policy=dict(type=algo))


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_trains_on_simple_spread_and_resumes(tmp_path, algo):
    main, create = _config(algo, tmp_path)
    first = serial_pipeline((copy.deepcopy(main), create), max_env_step=400)
    assert first["env_step"] == 400 and first["train_iter"] == 8 and first["env_episode"] == 16
    assert -60 < first["eval_return"] < 0  # the per-agent return of 25 steps of Simple Spread
    resumed = serial_pipeline((main, create), max_env_step=800, resume=True)
    assert resumed["env_step"] == 800 and resumed["train_iter"] == 16


def test_the_critic_reads_the_state_for_mappo_and_the_agent_s_observation_for_ippo():
    net = AgentsActorCritic(2, 4, 3, 5, [8], [8])
    obs = {"obs": torch.randn(6, 3, 2), "state": torch.randn(6, 4)}
    changed = dict(obs, obs=torch.randn(6, 3, 2))
    torch.testing.assert_close(net.value(obs), net.value(changed))  # MAPPO: the state alone
    assert not torch.allclose(net.actor_out(obs), net.actor_out(changed))
    own = AgentsActorCritic(2, None, 3, 5, [8], [8])
    assert not torch.allclose(own.value(obs), own.value(changed))
    same = dict(obs, obs=obs["obs"][:, :1].expand(6, 3, 2))  # every agent sees the same: its id tells them apart
    logits = net.actor_out(same)
    assert not torch.allclose(logits[:, 0], logits[:, 1])
    blind = AgentsActorCritic(2, 4, 3, 5, [8], [8], agent_id=False).actor_out(same)  # no id: alike
    torch.testing.assert_close(blind[:, 0], blind[:, 1])


def test_spaces_that_are_not_a_multi_agent_env_s_are_named():
    cfg = MAPPOPolicy.default_config()
    flat = gym.spaces.Box(-1, 1, (4,), np.float32)
    with pytest.raises(SpaceMismatchError, match="policy 'mappo' trains the agents of a multi-agent env"):
        MAPPOPolicy(dict(cfg, type="mappo"), flat, gym.spaces.Discrete(2))
    rows = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (3, 4), np.float32),
                            "alive": gym.spaces.Box(0, 1, (3,), np.int8)})
    with pytest.raises(SpaceMismatchError, match="this env has no state\\(\\).*use policy 'ippo'"):
        MAPPOPolicy(dict(cfg, type="mappo"), rows, gym.spaces.MultiDiscrete([5, 5, 5]))
    IPPOPolicy(dict(IPPOPolicy.default_config(), type="ippo"), rows, gym.spaces.MultiDiscrete([5, 5, 5]))
    with pytest.raises(SpaceMismatchError, match="one Discrete or one flat Box action space each"):
        IPPOPolicy(dict(IPPOPolicy.default_config(), type="ippo"), rows, gym.spaces.MultiDiscrete([5, 4, 5]))


def test_each_agent_s_return_is_logged_and_workers_collect_what_one_process_does(tmp_path):
    from middleware.progress_csv import read_progress

    main, create = _config("mappo", tmp_path)
    main["policy"]["eval"]["evaluator"]["eval_freq"] = 2
    sync = serial_pipeline((copy.deepcopy(main), create), max_env_step=400)
    columns = read_progress(str(tmp_path / "mappo_seed0" / "progress.csv"))
    for i in range(3):
        assert np.isfinite(columns[f"eval/agent{i}_return_mean"]).any()
        assert np.isfinite(columns[f"collect/agent{i}_episode_return"]).any()
    means = np.nanmean([columns[f"eval/agent{i}_return_mean"] for i in range(3)], axis=0)
    evaluated = np.isfinite(columns["eval/episode_return_mean"])
    np.testing.assert_allclose(means[evaluated], columns["eval/episode_return_mean"][evaluated], rtol=1e-6)
    assert len(sync["eval_agent_returns"]) == 3 and np.mean(sync["eval_agent_returns"]) == pytest.approx(
        sync["eval_return"])  # summary.json: the last evaluation's return of each agent

    split = dict(copy.deepcopy(main), exp_name=str(tmp_path / "async"))
    split["env"]["manager"] = dict(type="async", workers=2)
    workers = serial_pipeline((split, create), max_env_step=400)
    assert workers["eval_return"] == sync["eval_return"]  # the same rows, seeds and updates: the same run


def test_an_agent_that_left_counts_in_no_mean_of_the_loss():
    """An agent out of its row's episode (``alive`` 0) is in the batch with whatever it holds; the update is
    the one of the agents that acted."""
    from data.batch import make_batch

    rows = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (3, 4), np.float32),
                            "alive": gym.spaces.Box(0, 1, (3,), np.int8),
                            "state": gym.spaces.Box(-1, 1, (12,), np.float32)})
    torch.manual_seed(0)
    policy = MAPPOPolicy(dict(MAPPOPolicy.default_config(), type="mappo"), rows, gym.spaces.MultiDiscrete([5, 5, 5]))
    policy.optimizer_step.optimizer.param_groups[0]["lr"] = 0.0  # the loss is read, nothing learnt
    obs = {"obs": torch.randn(6, 3, 4), "alive": torch.ones(6, 3, dtype=torch.int8), "state": torch.randn(6, 12)}
    obs["alive"][3:, 2] = 0  # agent 2 left in the last three rows
    obs = make_batch(obs)  # a tree of tensors, as the env loop gives
    out = {key: value.clone() for key, value in policy.collect_mode.forward(obs).items()}  # out of inference mode

    def loss(noise):
        garbage = torch.zeros(6, 3)
        garbage[3:, 2] = noise  # what the departed agent's entries hold must not matter
        batch = make_batch(dict(obs=obs, action=out["action"], logp=out["logp"] + garbage, value=out["value"],
                                adv=torch.linspace(-1, 1, 18).reshape(6, 3) + 100 * garbage,
                                returns=out["value"] + 1 + 50 * garbage))
        return {k: float(v) for k, v in policy.learn_mode.forward(batch).items()
                if k in ("policy_loss", "value_loss", "entropy")}

    assert loss(0.0) == pytest.approx(loss(7.0), rel=1e-6)


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_box_actions_act_from_a_shared_gaussian_within_the_bounds_and_resume(tmp_path, algo):
    """mpe2's ``continuous_actions=True`` (a Box(0, 1, (5,)) per agent): each agent's action is drawn from a
    Gaussian on the shared actor's mean, learned from as drawn and sent to the env clipped to its bounds."""
    from data.batch import make_batch

    main, create = _config(algo, tmp_path)
    main["env"]["env_kwargs"] = dict(continuous_actions=True)
    first = serial_pipeline((copy.deepcopy(main), create), max_env_step=400)
    assert first["env_step"] == 400 and first["train_iter"] == 8 and -60 < first["eval_return"] < 0
    resumed = serial_pipeline((main, create), max_env_step=800, resume=True)
    assert resumed["env_step"] == 800 and resumed["train_iter"] == 16

    rows = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (3, 4), np.float32),
                            "alive": gym.spaces.Box(0, 1, (3,), np.int8),
                            "state": gym.spaces.Box(-1, 1, (12,), np.float32)})
    actions = gym.spaces.Box(0.0, 1.0, (3, 2), np.float32)
    cls = MAPPOPolicy if algo == "mappo" else IPPOPolicy
    torch.manual_seed(0)
    policy = cls(dict(cls.default_config(), type=algo, model=dict(init_log_std=0.5)), rows, actions)
    obs = make_batch({"obs": torch.randn(64, 3, 4), "alive": torch.ones(64, 3, dtype=torch.int8),
                      "state": torch.randn(64, 12)})  # a tree of tensors, as the env loop gives
    out = policy.collect_mode.forward(obs)
    assert out["raw_action"].shape == out["action"].shape == (64, 3, 2) and out["logp"].shape == (64, 3)
    assert (out["action"] >= 0).all() and (out["action"] <= 1).all()
    assert ((out["raw_action"] < 0) | (out["raw_action"] > 1)).any()  # drawn beyond the bounds: learned as drawn
    torch.testing.assert_close(out["action"], out["raw_action"].clamp(0, 1))
    greedy = policy.eval_mode.forward(obs)["action"]
    torch.testing.assert_close(greedy, policy.greedy_module()(obs))
    assert greedy.shape == (64, 3, 2) and (greedy >= 0).all() and (greedy <= 1).all()
    (mean, log_std), _ = policy.model(obs)
    torch.testing.assert_close(log_std, torch.full_like(mean, 0.5))  # one vector shared by the agents
    assert (mean - 0.5).abs().max() < 0.1  # untrained, the mean sits at the middle of the bounds [0, 1]
    with pytest.raises(SpaceMismatchError, match="a flat Box action space each \\(3 agents"):
        cls(dict(cls.default_config(), type=algo), rows, gym.spaces.Box(0.0, 1.0, (3, 2, 2), np.float32))


@pytest.mark.parametrize("algo, masked", [("mappo", False), ("mappo", True), ("qmix", False), ("qmix", True)])
def test_an_exported_file_takes_what_acting_reads(tmp_path, algo, masked):
    """The global state and ``alive`` are the critic's and the mixer's: the file of a decentralised actor takes
    the agents' observations (and their masks), nothing a deployment that acts per agent cannot give."""
    from commands.export import acting_inputs, export_policy
    from engine.registry import POLICY_REGISTRY

    spaces = {"obs": gym.spaces.Box(-1, 1, (3, 4), np.float32), "alive": gym.spaces.Box(0, 1, (3,), np.int8),
              "state": gym.spaces.Box(-1, 1, (12,), np.float32)}
    if masked:
        spaces["action_mask"] = gym.spaces.MultiBinary([3, 5])
    rows = gym.spaces.Dict(spaces)
    cls = POLICY_REGISTRY.get(algo)
    policy = cls(dict(cls.default_config(), type=algo), rows, gym.spaces.MultiDiscrete([5, 5, 5]))
    inputs = acting_inputs(policy.greedy_module().eval(), rows)
    assert [path for path, _ in inputs] == [("obs",)] + ([("action_mask",)] if masked else [])
    path = export_policy(policy, rows, str(tmp_path / "policy.pt"), "torchscript")  # checks the file acts alike
    obs = torch.randn(7, 3, 4)
    mask = torch.ones(7, 3, 5, dtype=torch.int8)
    mask[:, :, 0] = 0
    args = (obs, mask) if masked else (obs,)
    tree = {"obs": obs, "alive": torch.ones(7, 3, dtype=torch.int8), "state": torch.randn(7, 12)}
    if masked:
        tree["action_mask"] = mask
    expected = policy.eval_mode.forward(tree)["action"]
    torch.testing.assert_close(torch.jit.load(path)(*args), expected.long())
