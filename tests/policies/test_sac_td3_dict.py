"""SAC, TD3 and DDPG on a Dict observation (``{"vec", "goal", "image"}``, the image uint8): built with an
encoder per network, collected through the env loop into replay, learned from with every key's encoder moving,
``policy.obs_norm`` on the vector keys only, checkpointed and restored, compiled, and refused by ``baton
export``; SAC learns to act towards the goal its observation gives. The flat models keep their layers and
init order (a seed gives the weights it always gave).

The env is a contextual bandit of 4-step episodes: each step shows a new goal in [-1, 1]^2 and rewards
``-|action - goal|^2``; ``vec`` and the image are noise the policy must learn to ignore.
"""
from __future__ import annotations

import copy
import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from torch import nn

from commands.export import export_policy
from data.batch import make_batch
from data.env_loop import EnvLoop
from data.nstep import NStepBuilder
from data.obs import is_tree, stack
from data.replay import ReplayBuffer
from engine.config import deep_merge
from policies import SACPolicy, SpaceMismatchError
from policies.encoders import MultiInputEncoder
from policies.keyed_obs_norm import KeyedObsNorm
from policies.greedy import NotExportableError
from policies.continuous_models import SquashedGaussianActor, TwinQ
from policies.models import mlp
from policies.normalisation import model_obs
from policies.td3 import DDPGPolicy, TD3Policy
from policies.td3bc import TD3BCPolicy

OBS = spaces.Dict({"vec": spaces.Box(-1, 1, (3,), np.float32), "goal": spaces.Box(-1, 1, (2,), np.float32),
                   "image": spaces.Box(0, 255, (3, 8, 8), np.uint8)})
ACT = spaces.Box(-1, 1, (2,), np.float32)
POLICIES = {"sac": SACPolicy, "td3": TD3Policy, "ddpg": DDPGPolicy}
KEYS = ("goal", "image", "vec")  # the encoders' order: the space's (a Dict sorts its keys)


class GoalEnv(gym.Env):
    """Module docstring: the goal to reach in one step, noise in ``vec`` (offset by 3, for ``obs_norm``) and
    in the image."""

    observation_space, action_space = OBS, ACT

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def _obs(self):
        rng = self.np_random
        self._goal = rng.uniform(-1, 1, 2).astype(np.float32)
        return {"vec": (3 + rng.standard_normal(3)).astype(np.float32), "goal": self._goal.copy(),
                "image": rng.integers(0, 256, (3, 8, 8), dtype=np.uint8)}

    def step(self, action):
        reward = -float(np.sum((np.asarray(action) - self._goal) ** 2))
        self._t += 1
        return self._obs(), reward, self._t >= 4, False, {}


def _env(num_envs=2):
    return SyncVectorEnv([GoalEnv for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)


#: small encoders: the image's 3x3 convolutions, then 16 features a key
SMALL = {"image": {"hidden_sizes": [16]}, "vec": {"hidden_sizes": [16]}, "goal": {"hidden_sizes": [16]}}


def _policy(algo, seed=0, encoders=SMALL, **overrides):
    torch.manual_seed(seed)
    cls = POLICIES[algo]
    small = dict(model=dict(actor_head_hidden_size_list=[32, 32], critic_head_hidden_size_list=[32, 32],
                            encoders=encoders), learn=dict(batch_size=32))
    return cls(EasyDict(deep_merge(deep_merge(cls.default_config(), small), overrides)), OBS, ACT)


def _collect(policy, buffer, steps, loop=None, random=False):
    """``steps`` steps of 2 envs through the env loop with the collect mode, as 1-step transitions into
    ``buffer``; returns the loop (to go on with)."""
    loop = loop or EnvLoop(policy.collect_mode, _env(), seed=0)
    chunk = list(loop.run(steps, {"random": True} if random else {}))
    transitions = NStepBuilder(1, gamma=0.99).push({
        "obs": stack([s.obs for s in chunk]), "next_obs": stack([s.next_obs for s in chunk]),
        "action": torch.stack([s.out["action"] for s in chunk]),
        "reward": torch.stack([s.reward for s in chunk]).float(),
        "terminated": torch.stack([s.terminated for s in chunk]),
        "truncated": torch.stack([s.truncated for s in chunk])})
    buffer.push(make_batch(transitions))
    return loop


def _filled_buffer(policy, steps=32):
    buffer = ReplayBuffer(256)
    loop = _collect(policy, buffer, steps // 2, random=True)
    _collect(policy, buffer, steps // 2, loop)
    return buffer


def _tree(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return make_batch(dict(vec=3 + torch.randn(n, 3, generator=g), goal=torch.rand(n, 2, generator=g) * 2 - 1,
                           image=torch.randint(0, 256, (n, 3, 8, 8), generator=g, dtype=torch.uint8)))


def _encoders(policy):
    """Every ``MultiInputEncoder`` of the policy's online and target networks, by where it sits."""
    found = {}
    for owner, module in (("model", policy.model), ("target", getattr(policy, "_target_critic", None)),
                          ("target", getattr(policy, "_target_model", None))):
        if module is not None:
            found.update({f"{owner}.{name}": m for name, m in module.named_modules()
                          if isinstance(m, MultiInputEncoder)})
    return found


def _snapshot(module):
    return {name: p.detach().clone() for name, p in module.named_parameters()}


# ---- building --------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", POLICIES)
def test_actor_and_critics_each_have_an_encoder_of_every_key_and_the_targets_copy_the_critics(algo):
    policy = _policy(algo)
    encoders = _encoders(policy)
    target_names = ["target.encoder"] if algo == "sac" else ["target.critic.encoder", "target.actor.torso.0"]
    assert sorted(encoders) == sorted(["model.actor.torso.0", "model.critic.encoder"] + target_names)
    for enc in encoders.values():
        assert [p.path for p in enc.plans] == [(k,) for k in KEYS]
        assert [p.kind for p in enc.plans] == ["mlp", "cnn", "mlp"]
    actor, critic = encoders["model.actor.torso.0"], encoders["model.critic.encoder"]
    assert not {id(p) for p in actor.parameters()} & {id(p) for p in critic.parameters()}  # not shared
    # the target critic starts as the critic, encoder included, and is another module
    target = encoders[target_names[0]]
    for (name, p), (_, q) in zip(critic.named_parameters(), target.named_parameters()):
        assert torch.equal(p, q) and p is not q and not q.requires_grad, name
    # twin heads share the critic's one encoder (TD3, SAC); DDPG has one head
    heads = [n for n in ("q1", "q2") if hasattr(policy.model.critic, n)]
    assert heads == (["q1"] if algo == "ddpg" else ["q1", "q2"])
    assert policy.model.critic.q1[0][0].in_features == critic.out_dim + 2


@pytest.mark.parametrize("algo", POLICIES)
def test_a_tuple_and_a_nested_dict_observation_build_act_and_learn(algo):
    space = spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32),
                          spaces.Dict({"room": spaces.Discrete(3), "pos": spaces.Box(-1, 1, (2,), np.float32)})))
    cls = POLICIES[algo]
    cfg = EasyDict(deep_merge(cls.default_config(), dict(model=dict(actor_head_hidden_size_list=[8],
                                                                     critic_head_hidden_size_list=[8]))))
    policy = cls(cfg, space, ACT)
    obs = make_batch({"0": torch.zeros(5, 2), "1": {"room": torch.tensor([0, 1, 2, 0, 1]), "pos": torch.ones(5, 2)}})
    assert policy.eval_mode.forward(obs)["action"].shape == (5, 2)
    batch = make_batch(dict(obs=obs, next_obs=obs, action=torch.zeros(5, 2), reward=torch.ones(5),
                            terminated=torch.zeros(5, dtype=torch.bool), discount=torch.full((5,), 0.9),
                            weight=torch.ones(5)))
    assert np.isfinite(float(policy.learn_mode.forward(batch)["loss"]))


def test_a_declared_obs_shape_is_refused_by_name_and_td3bc_encodes_a_dict_as_td3_does():
    for cls, name in ((SACPolicy, "sac"), (TD3BCPolicy, "td3bc")):
        cfg = EasyDict(deep_merge(cls.default_config(), dict(model=dict(obs_shape=[3]))))
        with pytest.raises(SpaceMismatchError, match=rf"policy.model.obs_shape=\[3\] of {name}: .* remove "
                                                     r"policy.model.obs_shape"):
            cls(cfg, OBS, ACT)
    # a dataset of dict observations (docs/offline.md): the actor's and the critics' own encoders, from its config
    cfg = EasyDict(deep_merge(TD3BCPolicy.default_config(), dict(model=dict(encoders=SMALL))))
    policy = TD3BCPolicy(cfg, OBS, ACT)
    assert sorted(_encoders(policy)) == ["model.actor.torso.0", "model.critic.encoder", "target.actor.torso.0",
                                         "target.critic.encoder"]
    assert policy.eval_mode.forward(_tree())["action"].shape == (4, 2)


def test_flat_models_keep_their_layers_and_init_order():
    """A seed gives the weights the flat models had before they took Dict observations."""
    torch.manual_seed(0)
    actor, critic = SquashedGaussianActor(5, 2, [16, 16]), TwinQ(5, 2, [16])
    torch.manual_seed(0)
    old_actor = nn.Module()
    old_actor.torso, old_actor.mean, old_actor.log_std = mlp(5, [16, 16]), nn.Linear(16, 2), nn.Linear(16, 2)
    old_critic = nn.Module()
    old_critic.q1 = nn.Sequential(mlp(7, [16]), nn.Linear(16, 1))
    old_critic.q2 = nn.Sequential(mlp(7, [16]), nn.Linear(16, 1))
    for new, old in ((actor, old_actor), (critic, old_critic)):
        assert list(new.state_dict()) == list(old.state_dict())
        for key, value in old.state_dict().items():
            assert torch.equal(new.state_dict()[key], value), key
    assert critic.encoder is None


# ---- collect, replay, learn ------------------------------------------------------------------------
@pytest.mark.parametrize("algo", POLICIES)
def test_collect_through_the_env_loop_replay_and_learn_moves_every_encoder(algo):
    policy = _policy(algo)
    buffer = _filled_buffer(policy)
    assert len(buffer) == 64 and is_tree(buffer.storage.fields["obs"])
    assert buffer.storage.fields["obs"].image.dtype == torch.uint8  # stored as the env gives it
    encoders = _encoders(policy)
    before = {name: _snapshot(enc) for name, enc in encoders.items()}
    for update in range(1, 5):  # TD3: the actor and the targets move on updates 2 and 4 (update 1 has no actor pass)
        out = policy.learn_mode.forward(buffer.sample(32))
        for key in ("loss", "q_loss") + (("policy_loss",) if algo == "sac" else ("actor_loss",) * (update > 1)):
            assert np.isfinite(float(out[key])), (key, out)
    for name, enc in encoders.items():
        after = _snapshot(enc)
        for leaf, key in zip(enc.leaves, KEYS):
            moved = [n for n, _ in leaf.named_parameters()
                     if not torch.equal(after[f"leaves.{KEYS.index(key)}.{n}"],
                                        before[name][f"leaves.{KEYS.index(key)}.{n}"])]
            assert moved, f"{algo}: {name}'s encoder of {key!r} did not move"
    # acting after learning: the collect and eval modes on the loop's tree observations
    action = policy.eval_mode.forward(_tree(3))["action"]
    assert action.shape == (3, 2) and bool((action.abs() <= 1).all())


@pytest.mark.parametrize("algo", POLICIES)
def test_the_actor_loss_reaches_the_actor_and_never_the_critic_or_its_encoder(algo):
    """The critic encodes the observation once and the actor's loss reads those features detached: its
    gradient reaches every actor parameter (the actor's encoder included) and no critic parameter."""
    policy = _policy(algo)
    model, tree = policy.model, model_obs(_tree(6), torch.device("cpu"), policy.normalisation)
    action = torch.rand(6, 2) * 2 - 1
    actor_value = model(tree, action)[2]  # SAC: min_i Q_i(s, a~) of the actor's sample; TD3: Q1(s, pi(s))
    critic, actor = list(model.critic.parameters()), list(model.actor.parameters())
    grads = torch.autograd.grad(actor_value.sum(), critic + actor, allow_unused=True)
    assert all(g is None for g in grads[:len(critic)])
    assert all(g is not None and bool(g.abs().sum() > 0) for g in grads[len(critic):])


# ---- obs_norm ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_obs_norm_normalises_the_vector_keys_only(algo):
    policy = _policy(algo, obs_norm=True)
    norm = policy.normalisation.obs_norm
    assert isinstance(norm, KeyedObsNorm) and norm.paths == [("goal",), ("vec",)]  # never the image
    buffer = _filled_buffer(policy)  # collecting observes, random warm-up included
    policy.normalisation.merge()
    stats = dict(zip(["goal", "vec"], norm.norms))
    assert stats["vec"].mean.numpy() == pytest.approx(np.full(3, 3.0), abs=0.5)  # vec is 3 + N(0, 1)
    tree = _tree(6)
    seen = model_obs(tree, torch.device("cpu"), policy.normalisation)
    assert isinstance(seen, dict) and seen["image"] is tree.image  # untouched: the encoder scales it
    expected = ((tree.vec - stats["vec"].mean) / torch.sqrt(stats["vec"].var() + 1e-8)).clamp(-10, 10)
    torch.testing.assert_close(seen["vec"], expected.float(), rtol=1e-4, atol=1e-4)
    assert abs(float(seen["vec"].mean())) < 1.0  # centred, where the raw values sit near 3
    out = policy.learn_mode.forward(buffer.sample(32))
    assert np.isfinite(float(out["loss"]))
    # the statistics travel with the checkpoint and with the greedy module
    assert set(policy.state_dict()["obs_norm"]) == {f"norms.{i}.{s}" for i in (0, 1) for s in ("count", "mean", "m2")}
    greedy = policy.greedy_module()
    torch.testing.assert_close(greedy(tree), policy.eval_mode.forward(tree)["action"])


# ---- checkpoints ------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", POLICIES)
def test_state_dict_round_trip_restores_acting_and_learning(algo):
    policy = _policy(algo, seed=0, obs_norm=True)
    buffer = _filled_buffer(policy)
    policy.normalisation.merge()
    for _ in range(2):
        policy.learn_mode.forward(buffer.sample(32))
    blob = io.BytesIO()
    torch.save(policy.state_dict(), blob)
    restored = _policy(algo, seed=1, obs_norm=True)  # other weights until loaded
    tree = _tree(5)
    assert not torch.equal(restored.eval_mode.forward(tree)["action"], policy.eval_mode.forward(tree)["action"])
    restored.load_state_dict(torch.load(io.BytesIO(blob.getvalue()), weights_only=False))
    torch.testing.assert_close(restored.eval_mode.forward(tree)["action"], policy.eval_mode.forward(tree)["action"],
                               rtol=0, atol=0)
    batch = buffer.sample(32)
    outs = []
    for p in (policy, restored):  # the same next update: online, target and optimizer state all restored
        torch.manual_seed(5)
        outs.append(p.learn_mode.forward(copy.deepcopy(batch)))
    assert float(outs[0]["loss"]) == float(outs[1]["loss"])
    for (name, a), b in zip(policy.state_dict()["model"].items(), restored.state_dict()["model"].values()):
        assert torch.equal(a, b), name


# ---- export, compile --------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_greedy_module_takes_the_tree_and_exports_one_input_per_key(fmt, tmp_path):
    """The exported file takes each key as an input of its own, named by the key, and acts as the module does on
    the tree (``export_policy`` checks the file too; here it is run by hand, as a user would)."""
    from commands.export import observation_inputs

    policy = _policy("td3")
    tree = _tree(4)
    greedy = policy.greedy_module()
    torch.testing.assert_close(greedy(tree), policy.eval_mode.forward(tree)["action"])
    plain = {key: tree[key] for key in KEYS}  # nested plain dicts act alike
    torch.testing.assert_close(greedy(plain), greedy(tree))
    path = export_policy(policy, OBS, str(tmp_path / f"policy.{fmt}"), fmt)
    names = [".".join(p) for p, _ in observation_inputs(OBS)]
    assert names == list(KEYS)
    inputs = [tree[key] for key in KEYS]
    if fmt == "torchscript":
        got = torch.jit.load(path)(*inputs)
    else:
        onnxruntime = pytest.importorskip("onnxruntime")
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == names
        got = torch.as_tensor(session.run(None, {n: x.numpy() for n, x in zip(names, inputs)})[0])
    torch.testing.assert_close(got, greedy(tree).detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_compiled_hot_paths_take_tree_observations_as_eager(algo):
    """The hot paths get the tree as plain dicts, which dynamo traces whole (a treetensor would break each
    graph at the encoders' lookups): no fallback, no graph break, eager's numbers."""
    from torch._dynamo.utils import counters
    from test_compile import CountingBackend, compiled_with  # the compile tests' backend (aot_eager)

    batch = _filled_buffer(_policy(algo)).sample(32)
    tree = _tree(3)
    results = []
    counters.clear()
    for mode in ("none", "compile"):
        policy = _policy(algo, compile=mode)
        with compiled_with(CountingBackend()) if mode == "compile" else _nothing():
            stats = [policy.learn_mode.forward(copy.deepcopy(batch)) for _ in range(2)]
            torch.manual_seed(7)
            collect = policy.collect_mode.forward(tree)["action"]
            act = policy.eval_mode.forward(tree)["action"]
        results.append((policy, stats, collect, act))
    (eager, e_stats, e_collect, e_act), (compiled, c_stats, c_collect, c_act) = results
    paths = compiled.hot_paths.values()
    assert paths and all(p.mode == "compile" and p.fallback_error is None for p in paths), \
        [(p.name, p.mode, p.fallback_error) for p in paths]
    assert not counters["graph_break"], dict(counters["graph_break"])
    for e, c in zip(e_stats, c_stats):
        assert float(c["loss"]) == pytest.approx(float(e["loss"]), rel=1e-5, abs=1e-6)
    torch.testing.assert_close(c_collect, e_collect, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c_act, e_act, rtol=1e-5, atol=1e-6)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# ---- learning ----------------------------------------------------------------------------------------
def _mean_eval_reward(policy, episodes_steps=40):
    loop = EnvLoop(policy.eval_mode, _env(4), seed=123)
    rewards = torch.stack([step.reward for step in loop.run(episodes_steps)])
    return float(rewards.mean())


def test_sac_learns_to_act_towards_the_goal_its_observation_gives():
    """Acting near 0 whatever the goal (the untrained actor) scores about -0.67 a step (E|g|^2 for g uniform on
    [-1, 1]^2); acting on the goal key, ignoring the noise keys, scores near 0 (-0.06 and -0.02 with seeds 0
    and 1 after these 720 updates, about 4 s)."""
    policy = _policy("sac", seed=0, discount_factor=0.0, encoders={"image": {"type": "mlp", "hidden_sizes": [16]}},
                     learn=dict(batch_size=64, learning_rate_q=3e-3, learning_rate_policy=3e-3))
    before = _mean_eval_reward(policy)
    buffer = ReplayBuffer(4096)
    loop = _collect(policy, buffer, 64, random=True)
    for _ in range(60):
        _collect(policy, buffer, 4, loop)
        for _ in range(12):
            policy.learn_mode.forward(buffer.sample(64))
    after = _mean_eval_reward(policy)
    assert after > -0.15 and after > before + 0.5, (before, after)
