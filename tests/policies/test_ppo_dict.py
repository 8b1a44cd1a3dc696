"""PPO, A2C and PPO-LSTM on dictionary observations and legal-action masks (issue 31): they build on Dict and Tuple
spaces, collect through the env loop (gymnasium ``SyncVectorEnv``, SAME_STEP autoreset), learn from the rollout
with GAE, and learning's forward on the stored trees gives the log-probs acting gave; with a mask (Taxi-v4's,
moved into the observation by ``data.action_masks``, and ``PickTheTarget`` below) acting never picks an illegal
action, the loss's entropy is over the legal actions only (sb3-contrib MaskablePPO), the greedy module masks, and
masked PPO learns a small masked task."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from data.action_masks import with_action_mask
from data.env_loop import EnvLoop
from data.obs import is_tree, num_rows, to_tensor
from engine.config import deep_merge
from engine.context import OnlineRLContext
from engine.registry import POLICY_REGISTRY
from middleware import StepCollector, gae_estimator
from middleware.evaluator import evaluate_episodes
from middleware.learner import OnPolicyLearner
from policies import SpaceMismatchError
from policies.encoders import MultiInputEncoder
from policies.greedy import NotExportableError

ALGOS = ["ppo", "a2c", "ppo_lstm"]
NUM_ENVS, STEPS, SEQ_LEN = 4, 16, 8


class DirEnv(gym.Env):
    """A Dict observation of a vector, a direction and a small channels-last image; reward 1 for the action
    ``dir % 3``. Episodes end at random (terminations) or at the TimeLimit the tests wrap it in (truncations)."""

    def __init__(self, tuple_obs: bool = False, continuous: bool = False):
        vec, direction = spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(4)
        image = spaces.Box(0, 255, (7, 7, 3), np.uint8)
        self.tuple_obs = tuple_obs
        self.observation_space = (spaces.Tuple((vec, direction)) if tuple_obs else
                                  spaces.Dict({"vec": vec, "dir": direction, "image": image}))
        self.action_space = spaces.Box(-1, 1, (2,), np.float32) if continuous else spaces.Discrete(3)
        self._dir = 0

    def _obs(self):
        self._dir = int(self.np_random.integers(4))
        vec = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        if self.tuple_obs:
            return vec, self._dir
        return {"vec": vec, "dir": self._dir, "image": self.np_random.integers(0, 256, (7, 7, 3), dtype=np.uint8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        if isinstance(self.action_space, spaces.Box):  # continuous: the first coordinate towards dir / 3
            reward = -abs(float(action[0]) - self._dir / 3)
        else:
            reward = float(int(action) == self._dir % 3)
        return self._obs(), reward, bool(self.np_random.random() < 0.15), False, {}


class PickTheTarget(gym.Env):
    """A masked task: each step shows a target action (one-hot ``target``) and the legal actions
    (``action_mask``: the target and, each with probability 1/2, the others); reward 1 for the target, 0 for
    another legal action, -1 for an illegal one. Episodes of ``length`` steps: returns lie in [-length, length],
    a uniformly random legal policy makes about ``length * 2 / (n + 1)``."""

    def __init__(self, n: int = 5, length: int = 8):
        self.n, self.length = n, length
        self.observation_space = spaces.Dict({"target": spaces.Box(0, 1, (n,), np.float32),
                                              "action_mask": spaces.Box(0, 1, (n,), np.int8)})
        self.action_space = spaces.Discrete(n)
        self._t, self._target, self._mask = 0, 0, np.ones(n, np.int8)

    def _obs(self):
        self._target = int(self.np_random.integers(self.n))
        self._mask = (self.np_random.random(self.n) < 0.5).astype(np.int8)
        self._mask[self._target] = 1
        return {"target": np.eye(self.n, dtype=np.float32)[self._target], "action_mask": self._mask.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        action = int(action)
        reward = 1.0 if action == self._target else (0.0 if self._mask[action] else -1.0)
        self._t += 1
        return self._obs(), reward, self._t >= self.length, False, {}


def _vector(make, num_envs=NUM_ENVS):
    """``num_envs`` copies in a gymnasium SyncVectorEnv in SAME_STEP autoreset mode (the env loop's)."""
    return SyncVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)


ENVS = {
    "dict": lambda: gym.wrappers.TimeLimit(DirEnv(), 5),
    "tuple": lambda: gym.wrappers.TimeLimit(DirEnv(tuple_obs=True), 5),
    "continuous": lambda: gym.wrappers.TimeLimit(DirEnv(continuous=True), 5),
    "taxi": lambda: gym.wrappers.TimeLimit(with_action_mask(gym.make("Taxi-v4")), 12),
    "pick": lambda: PickTheTarget(),
}


def _cfg(algo, **policy):
    """``algo``'s policy section for small rollouts of ``NUM_ENVS x STEPS`` (sequences of ``SEQ_LEN``)."""
    cls = POLICY_REGISTRY.get(algo)
    over = dict(collect=dict(n_sample=NUM_ENVS * STEPS), learn=dict(batch_size=2 * SEQ_LEN, grad_clip_value=0.5))
    if algo == "ppo_lstm":
        over["learn"]["seq_len"] = SEQ_LEN
        over["model"] = dict(hidden_size=16, encoder_hidden_size_list=[16])
    return EasyDict(deep_merge(deep_merge(cls.default_config(), over), policy))


def _policy(algo, env, **policy):
    torch.manual_seed(0)
    return POLICY_REGISTRY.get(algo)(_cfg(algo, **policy), env.single_observation_space, env.single_action_space)


def _collect(policy, env, algo):
    """One rollout through the env loop, with GAE: flat transitions, or sequences for ``ppo_lstm``."""
    ctx = OnlineRLContext()
    StepCollector(policy.collect_mode, env, NUM_ENVS * STEPS, time_major=True, seed=0)(ctx)
    gae_estimator(policy.collect_mode, gamma=0.99, lam=0.95, seq_len=SEQ_LEN if algo == "ppo_lstm" else None)(ctx)
    return ctx.trajectories


def _learn_forward(policy, batch):
    """The learn model on a batch, as the loss takes it: (logits, values, the stored masks or None) per row."""
    inputs = policy._learn_inputs(batch)
    with torch.no_grad():
        head, value = policy.model(*inputs)
    mask = policy._mask(inputs[0])
    return head, value, None if mask is None else policy._rows(mask)


def _legal_entropy(logits, mask):
    """The entropy of the softmax over the legal actions only, row by row, computed without masked_logits."""
    out = []
    for row, legal in zip(logits, mask):
        p = torch.softmax(row[legal], -1)
        out.append(-(p * p.log()).sum())
    return torch.stack(out)


def _encoder_params(model):
    """Each key encoder's parameters, per key encoder, of every MultiInputEncoder in ``model``."""
    return [[p.detach().clone() for p in leaf.parameters()] for module in model.modules()
            if isinstance(module, MultiInputEncoder) for leaf in module.leaves]


def _collected(algo, env_name, **overrides):
    """``algo``'s policy and one collected rollout of the env ``env_name``, its envs closed."""
    env = _vector(ENVS[env_name])
    try:
        policy = _policy(algo, env, **overrides)
        return policy, _collect(policy, env, algo)
    finally:
        env.close()


# ---- building, collecting and learning on trees -------------------------------------------------------------
@pytest.mark.parametrize("env_name", ["dict", "tuple", "taxi", "continuous"])
@pytest.mark.parametrize("algo", ALGOS)
def test_builds_collects_and_learns_on_tree_observations(algo, env_name):
    """The rollout's observations are trees; learning's forward on them gives the log-probs and values acting
    gave (masked ones where the env has a mask), so the first update's ratio is 1; the update trains every key's
    encoder."""
    policy, batch = _collected(algo, env_name)
    assert is_tree(batch.obs) and num_rows(batch.obs) == (NUM_ENVS * STEPS // SEQ_LEN if algo == "ppo_lstm"
                                                          else NUM_ENVS * STEPS)
    head, value, mask = _learn_forward(policy, batch)
    assert (mask is not None) == (env_name == "taxi")
    if env_name == "continuous":
        mean, log_std = head
        logp = torch.distributions.Normal(mean, log_std.exp()).log_prob(policy._rows(batch.raw_action)).sum(-1)
    else:
        dist = torch.distributions.Categorical(logits=head if mask is None else head.masked_fill(~mask, -1e30))
        logp = dist.log_prob(policy._rows(batch.action).long())
    assert torch.allclose(logp, policy._rows(batch.logp), atol=1e-5)
    assert torch.allclose(value, policy._rows(batch.value), atol=1e-5)
    before = _encoder_params(policy.model)
    keys = {"dict": 3, "tuple": 2, "taxi": 1, "continuous": 3}[env_name]
    assert len(before) == keys * (2 if algo == "ppo_lstm" else 1)  # ppo_lstm: the actor's and the critic's cores
    out = policy.learn_mode.forward(batch)
    assert torch.isfinite(out["loss"])
    if algo != "a2c":
        assert float(out["approx_kl"]) == pytest.approx(0.0, abs=1e-6)
    after = _encoder_params(policy.model)
    for old, new in zip(before, after):  # every key's encoder got a gradient step
        assert any(not torch.equal(o, n) for o, n in zip(old, new))


def test_dict_observations_with_obs_norm_normalise_the_vector_keys():
    """``policy.obs_norm`` on a Dict space: collecting updates the statistics of the vector key only, and learning
    runs on the normalised trees."""
    policy, batch = _collected("ppo", "dict", obs_norm=True)
    norm = policy.normalisation.obs_norm
    policy.normalisation.merge()
    assert norm.paths == [("vec",)] and float(norm.norms[0].count) >= NUM_ENVS * STEPS
    assert torch.isfinite(policy.learn_mode.forward(batch)["loss"])


# ---- masks ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_name", ["taxi", "pick"])
@pytest.mark.parametrize("algo", ALGOS)
def test_masked_acting_never_picks_an_illegal_action(algo, env_name):
    """Over a whole collection (and the eval mode on the same observations) every action is legal, where the
    unmasked distribution gives the illegal actions most of the mass and its argmax picks them often."""
    policy, batch = _collected(algo, env_name)
    mask = policy._rows(batch.obs.action_mask).bool()
    action = policy._rows(batch.action).long()
    rows = torch.arange(len(action))
    assert int((~mask).sum()) > len(action)          # illegal actions were there to pick
    assert int((~mask[rows, action]).sum()) == 0     # and none was picked
    head, _, _ = _learn_forward(policy, batch)
    assert float(torch.softmax(head, -1)[~mask].sum()) > 0.3 * len(action)  # unmasked, they would be drawn
    assert int((~mask[rows, head.argmax(-1)]).sum()) > 0                     # and taken greedily
    if algo != "ppo_lstm":  # the eval mode: the most likely legal action
        greedy = policy.eval_mode.forward(batch.obs)["action"].long()
        assert torch.equal(greedy, head.masked_fill(~mask, float("-inf")).argmax(-1))


@pytest.mark.parametrize("algo", ["ppo", "ppo_lstm"])
def test_loss_entropy_and_log_probs_are_the_masked_distributions(algo):
    """The loss's entropy is the mean entropy over each row's legal actions (not over all of them), and its
    log-probs are the masked ones acting stored (the first update's ratio is 1)."""
    env = _vector(ENVS["taxi"])
    try:
        policy = _policy(algo, env, learn=dict(entropy_weight=0.01))
        batch = _collect(policy, env, algo)
    finally:
        env.close()
    head, _, mask = _learn_forward(policy, batch)
    expected = _legal_entropy(head, mask).mean()
    unmasked = torch.distributions.Categorical(logits=head).entropy().mean()
    assert float(unmasked - expected) > 0.1
    out = policy.learn_mode.forward(batch)
    assert float(out["entropy"]) == pytest.approx(float(expected), abs=1e-5)
    assert float(out["approx_kl"]) == pytest.approx(0.0, abs=1e-6)


def test_a_mask_with_continuous_actions_is_refused_with_the_fix():
    obs = spaces.Dict({"pos": spaces.Box(-1, 1, (3,)), "action_mask": spaces.Box(0, 1, (2,), np.int8)})
    with pytest.raises(SpaceMismatchError, match=r"continuous action is not masked.*Drop the mask"):
        POLICY_REGISTRY.get("ppo")(_cfg("ppo"), obs, spaces.Box(-1, 1, (2,)))
    with pytest.raises(SpaceMismatchError, match=r"has shape \(2,\), but the action space .* has 3 actions"):
        POLICY_REGISTRY.get("ppo")(_cfg("ppo"), obs, spaces.Discrete(3))


def test_a_declared_obs_shape_with_a_dict_space_is_refused():
    obs = DirEnv().observation_space
    with pytest.raises(SpaceMismatchError, match=r"policy.model.obs_shape=\[4\].*remove policy.model.obs_shape"):
        POLICY_REGISTRY.get("ppo")(_cfg("ppo", model=dict(obs_shape=[4])), obs, spaces.Discrete(3))


def test_encoder_settings_reach_the_model():
    cfg = _cfg("ppo", model=dict(encoders={"vec": {"hidden_sizes": [7]}, "dir": {"embedding_dim": 3}}))
    policy = POLICY_REGISTRY.get("ppo")(cfg, DirEnv().observation_space, spaces.Discrete(3))
    encoder = policy.model.shared
    assert isinstance(encoder, MultiInputEncoder)
    assert dict(zip([p[0] for p in encoder.paths], encoder.out_dims))["vec"] == 7
    assert dict(zip([p[0] for p in encoder.paths], encoder.out_dims))["dir"] == 3


# ---- the greedy module and export ----------------------------------------------------------------------------
def test_greedy_module_takes_the_tree_masks_and_exports_the_mask_as_its_last_input(tmp_path):
    """Taxi's policy exports as (observation, action_mask); the file's greedy action is the best legal one."""
    from commands.export import export_policy

    policy, batch = _collected("ppo", "taxi")
    module = policy.greedy_module()
    with torch.no_grad():
        greedy = module(batch.obs)
    assert torch.equal(greedy, policy.eval_mode.forward(batch.obs)["action"].long())
    mask = batch.obs.action_mask.bool()
    assert mask[torch.arange(len(greedy)), greedy].all()
    path = export_policy(policy, policy.observation_space, str(tmp_path / "p.pt"), "torchscript")
    exported = torch.jit.load(path)
    assert torch.equal(exported(batch.obs.observation, batch.obs.action_mask), greedy)
    only_last = torch.zeros_like(batch.obs.action_mask)
    only_last[:, -1] = 1  # a mask of one legal action: the file takes it
    assert (exported(batch.obs.observation, only_last) == only_last.shape[1] - 1).all()


def test_greedy_module_of_continuous_actions_on_a_dict_space_is_the_clipped_mean():
    policy, batch = _collected("ppo", "continuous")
    with torch.no_grad():
        action = policy.greedy_module()(batch.obs)
        mean = policy.model.actor_out(batch.obs)
    assert torch.equal(action, mean.clamp(-1, 1))
    assert torch.equal(action, policy.eval_mode.forward(batch.obs)["action"])


# ---- learning --------------------------------------------------------------------------------------------------
def _greedy_return(policy, seed):
    env = _vector(ENVS["pick"], 2)
    try:
        return float(np.mean(evaluate_episodes(EnvLoop(policy.eval_mode, env), 8, seed=seed)["returns"]))
    finally:
        env.close()


def test_masked_ppo_learns_a_masked_task():
    """On ``PickTheTarget`` (8 steps, 5 actions; a uniformly random legal policy makes about 8 * 2 / 6) the
    untrained greedy policy makes about 1; after 30 collects of 64 steps (about 1 s) masked PPO picks the target
    nearly always (8 of 8 by the 20th collect for torch seeds 0 to 4)."""
    env = _vector(ENVS["pick"])
    policy = _policy("ppo", env, learn=dict(learning_rate=3e-3, epoch_per_collect=4, entropy_weight=0.0))
    untrained = _greedy_return(policy, seed=1)
    collector = StepCollector(policy.collect_mode, env, NUM_ENVS * STEPS, time_major=True, seed=0)
    gae = gae_estimator(policy.collect_mode, gamma=0.9, lam=0.95)
    learner = OnPolicyLearner(policy.learn_mode, epochs=4, batch_size=2 * SEQ_LEN,
                              generator=torch.Generator().manual_seed(0))
    try:
        for _ in range(30):
            ctx = OnlineRLContext()
            collector(ctx)
            gae(ctx)
            learner(ctx)
    finally:
        env.close()
    trained = _greedy_return(policy, seed=1)
    assert untrained < 6.0 and trained >= 7.5, (untrained, trained)


def test_greedy_actor_masks_any_tree_it_is_given():
    """``GreedyActor`` on a tree (a ``ttorch.Tensor`` or plain dicts, as any policy's greedy module gets one)
    takes the best legal action and leaves the keys' dtypes to the network."""
    from data.batch import ttorch
    from policies.greedy import GreedyActor

    class Logits(torch.nn.Module):
        def forward(self, obs):
            assert obs["room"].dtype == torch.int64  # not cast to float on the way
            return torch.tensor([[3.0, 2.0, 1.0]]).expand(len(obs["room"]), 3)

    mask = torch.tensor([[1, 1, 1], [0, 1, 1], [0, 0, 1], [0, 0, 0]], dtype=torch.int8)
    obs = {"room": torch.zeros(4, dtype=torch.long), "action_mask": mask}
    actor = GreedyActor(Logits(), discrete=True)
    assert actor(obs).tolist() == [0, 1, 2, 0]  # no legal action: as if all were legal
    assert actor(ttorch.Tensor(obs)).tolist() == [0, 1, 2, 0]


@pytest.mark.parametrize("algo,env_id", [("ppo", "Taxi-v4"), ("a2c", "FrozenLake-v1"), ("ppo_lstm", "Taxi-v4")])
def test_trains_and_resumes_from_algo_and_env(tmp_path, algo, env_id):
    """``--algo ppo|a2c|ppo_lstm --env Taxi-v4|FrozenLake-v1``: Taxi's info mask joins its observation, FrozenLake's
    lone Discrete becomes a key of a dict (``data.action_masks``); a short run trains, checkpoints and resumes."""
    from commands.algo_env import build_config
    from pipelines import serial_pipeline

    main, create = build_config(algo, env_id)
    main.update(exp_name=str(tmp_path / "run"), log=dict(progress=False))
    main["env"].update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1)
    main["policy"] = dict(collect=dict(n_sample=32), learn=dict(batch_size=16, epoch_per_collect=1),
                          eval=dict(evaluator=dict(eval_freq=1000)))
    if algo == "ppo_lstm":
        main["policy"]["learn"]["seq_len"] = 8
    first = serial_pipeline((main, create), max_env_step=64)
    assert first["env_step"] == 64 and first["train_iter"] == 4
    resumed = serial_pipeline((main, create), max_env_step=128, resume=True)
    assert resumed["env_step"] == 128 and resumed["train_iter"] == 8


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_eval_mode_takes_the_env_s_dict_of_arrays(algo):
    """Acting by hand (docs/after_training.md): the vector env's own dict of arrays acts as the env loop's tree."""
    env = _vector(ENVS["taxi"])
    policy = _policy(algo, env)
    obs, _ = env.reset(seed=0)
    assert torch.equal(policy.eval_mode.forward(obs)["action"], policy.eval_mode.forward(to_tensor(obs))["action"])
