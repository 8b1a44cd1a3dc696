"""QMIX, VDN and IQL (issue 32, item 2, value decomposition): the agents' shared Q network mixed into the team's
value on mpe2's Simple Spread through the standard pipeline; the mixer's monotonicity, VDN's sum, agents that left
adding nothing, each agent exploring on its own draw, and spaces that do not fit named."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

import dizoo.pettingzoo.envs  # noqa: E402,F401  (registers the mpe env type)
from data.batch import make_batch  # noqa: E402
from data.obs import from_plain  # noqa: E402
from pipelines import serial_pipeline  # noqa: E402
from policies.qmix import AgentsQNetwork, IQLPolicy, QMixer, QMixPolicy, VDNPolicy  # noqa: E402
from policies.spaces import SpaceMismatchError  # noqa: E402

ROWS = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (3, 4), np.float32),
                        "alive": gym.spaces.Box(0, 1, (3,), np.int8),
                        "state": gym.spaces.Box(-1, 1, (12,), np.float32)})
ACTIONS = gym.spaces.MultiDiscrete([5, 5, 5])


def _policy(cls, **learn):
    cfg = cls.default_config()
    cfg["learn"] = dict(cfg["learn"], **learn)
    return cls(dict(cfg, type=cls.mixer if cls.mixer != "none" else "iql"), ROWS, ACTIONS)


@pytest.mark.parametrize("algo, model", [("qmix", {}), ("vdn", {}), ("iql", {}), ("qmix", dict(recurrent=True))],
                         ids=["qmix", "vdn", "iql", "qmix-recurrent"])
def test_trains_on_simple_spread_and_resumes(tmp_path, algo, model):
    """The recurrent agent too: its sequences replayed, evaluated with a memory per env, its buffer resumed."""
    main = dict(exp_name=str(tmp_path / algo), log=dict(progress=False),
                env=dict(collector_env_num=4, evaluator_env_num=2, n_evaluator_episode=2, stop_value=float("inf")),
                policy=dict(random_collect_size=64, model=model, learn=dict(batch_size=32, update_per_collect=2),
                            eval=dict(evaluator=dict(eval_freq=1000))))
    create = dict(env=dict(type="mpe"), policy=dict(type=algo))
    first = serial_pipeline((copy.deepcopy(main), create), max_env_step=256)
    assert first["env_step"] == 256 and first["train_iter"] > 0 and first["env_episode"] == 8
    assert -80 < first["eval_return"] < 0  # the per-agent return of 25 steps of Simple Spread
    resumed = serial_pipeline((main, create), max_env_step=512, resume=True)
    assert resumed["env_step"] == 512 and resumed["train_iter"] > first["train_iter"]


def test_the_qmix_mixer_never_decreases_in_an_agent_s_value():
    torch.manual_seed(0)
    mixer = QMixer(num_agents=3, state_dim=6, embed_dim=8, hypernet_hidden=16)
    q = torch.randn(64, 3, requires_grad=True)
    mixer(q, torch.randn(64, 6)).sum().backward()
    assert (q.grad >= 0).all() and (q.grad > 0).any()


def test_the_mixer_s_gain_does_not_grow_with_the_state_s_scale():
    """The state is normalised before the hypernetworks (``policy.model.state_norm``): the mixer's gain on an
    agent's value (``dQ_tot/dq_i``) is the same for a state and for ten times it. Without it the gain grows with the
    state's scale, and on Simple Spread Q_tot diverged (BENCHMARKS.md)."""
    def gain(mixer, state):
        q = torch.randn(64, 3, generator=torch.Generator().manual_seed(1), requires_grad=True)
        mixer(q, state).sum().backward()
        return q.grad

    torch.manual_seed(0)
    state = torch.randn(64, 6)
    normed = QMixer(num_agents=3, state_dim=6, embed_dim=8, hypernet_hidden=16)
    torch.testing.assert_close(gain(normed, state), gain(normed, 10 * state), rtol=1e-3, atol=1e-4)
    raw = QMixer(num_agents=3, state_dim=6, embed_dim=8, hypernet_hidden=16, state_norm=False)
    assert gain(raw, 10 * state).mean() > 3 * gain(raw, state).mean()


def test_vdn_sums_the_agents_that_acted_and_iql_keeps_them_apart():
    alive = torch.tensor([[1, 1, 1], [1, 0, 1]], dtype=torch.int8)
    chosen = torch.tensor([[1.0, 2.0, 3.0], [1.0, 100.0, 3.0]])
    vdn = AgentsQNetwork(4, None, 3, 5, [8], mixer="vdn")
    assert vdn.mix(chosen, alive, None).tolist() == [6.0, 4.0]  # agent 1 left row 1: its 100 adds nothing
    iql = AgentsQNetwork(4, None, 3, 5, [8], mixer="none")
    assert iql.mix(chosen, alive, None).tolist() == [[1, 2, 3], [1, 0, 3]]


@pytest.mark.parametrize("cls", [VDNPolicy, IQLPolicy])
def test_a_truncated_row_bootstraps_from_the_agents_that_acted(cls):
    """A row's final observation has no agent acting next (``alive`` 0): at a truncation the bootstrap still
    counts the agents that acted; at a termination it is cut; an agent that left mid-row adds nothing."""
    torch.manual_seed(0)
    policy = _policy(cls, learning_rate=1e-12)
    obs = {"obs": torch.randn(3, 3, 4), "alive": torch.ones(3, 3, dtype=torch.int8), "state": torch.ones(3, 12)}
    gone = dict(obs, alive=torch.tensor([[0, 0, 0], [0, 0, 0], [1, 1, 0]], dtype=torch.int8))
    batch = make_batch(dict(obs=obs, next_obs=gone, action=torch.zeros(3, 3, dtype=torch.long),
                            reward=torch.zeros(3, 3), discount=torch.ones(3),
                            terminated=torch.tensor([False, True, False]), truncated=torch.tensor([True, False, False])))
    policy._target_model.load_state_dict(policy.model.state_dict())
    with torch.no_grad():
        q = policy.model(from_plain(gone))
        best = q.max(-1).values  # double Q with equal nets: the target rates the online net's pick, its own best
    out = policy._loss(*[from_plain(v) if isinstance(v, dict) else v for v in (
        obs, gone, batch.action, batch.reward, batch.discount, (~batch.terminated).float(), batch.truncated, None)])
    target = out[2]
    if cls is VDNPolicy:
        torch.testing.assert_close(target, torch.stack([best[0].sum(), torch.tensor(0.0), best[2, :2].sum()]))
    else:
        torch.testing.assert_close(target, torch.stack([best[0], torch.zeros(3), best[2] * torch.tensor([1, 1, 0])]))


@pytest.mark.parametrize("cls", [QMixPolicy, VDNPolicy, IQLPolicy])
def test_an_agent_that_left_changes_nothing_of_the_loss(cls):
    torch.manual_seed(0)
    policy = _policy(cls, learning_rate=1e-12)
    alive = torch.ones(6, 3, dtype=torch.int8)
    alive[3:, 2] = 0  # agent 2 left in the last three rows

    def loss(noise):
        obs = {"obs": torch.randn(6, 3, 4, generator=torch.Generator().manual_seed(1)), "alive": alive,
               "state": torch.ones(6, 12)}
        obs["obs"][3:, 2] += noise
        action = torch.tensor([[0, 1, 2]] * 6)
        action[3:, 2] = int(noise) % 5
        batch = make_batch(dict(obs=obs, next_obs=obs, action=action, reward=torch.ones(6, 3),
                                discount=torch.full((6,), 0.99), terminated=torch.zeros(6, dtype=torch.bool),
                                truncated=torch.zeros(6, dtype=torch.bool)))
        policy._target_model.load_state_dict(policy.model.state_dict())
        return float(policy.learn_mode.forward(batch)["loss"])

    # the departed agent's reward counts as the team's (each agent's reward in a row is averaged): kept equal here
    assert loss(0.0) == pytest.approx(loss(3.0), rel=1e-5)


def test_each_agent_explores_on_its_own_draw():
    torch.manual_seed(0)
    policy = _policy(QMixPolicy)
    obs = make_batch({"obs": torch.zeros(512, 3, 4), "alive": torch.ones(512, 3, dtype=torch.int8),
                      "state": torch.zeros(512, 12)})
    action = policy.collect_mode.forward(obs, eps=0.5)["action"]
    assert action.shape == (512, 3)
    greedy = policy.eval_mode.forward(obs)["action"]
    differs = (action != greedy).float().mean(0)  # each agent: about half explore, 4 of 5 random actions differ
    assert ((differs > 0.3) & (differs < 0.5)).all()
    assert not bool((action != greedy).all(-1).all())  # not the rows' draws: agents of a row explore apart


def test_spaces_that_do_not_fit_are_named():
    flat = gym.spaces.Box(-1, 1, (4,), np.float32)
    with pytest.raises(SpaceMismatchError, match="policy 'qmix' trains the agents of a multi-agent env"):
        QMixPolicy(dict(QMixPolicy.default_config(), type="qmix"), flat, gym.spaces.Discrete(2))
    stateless = gym.spaces.Dict({k: v for k, v in ROWS.spaces.items() if k != "state"})
    with pytest.raises(SpaceMismatchError, match="no state\\(\\).*use policy 'vdn'"):
        QMixPolicy(dict(QMixPolicy.default_config(), type="qmix"), stateless, ACTIONS)
    VDNPolicy(dict(VDNPolicy.default_config(), type="vdn"), stateless, ACTIONS)  # a sum needs no state
