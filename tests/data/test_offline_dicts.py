"""Dictionary observations offline (issue 31 item 1): Dict/Tuple datasets written, read and flat-copied leaf by
leaf (an image stays uint8), their spaces compared key by key; BC, CQL and TD3+BC learning from them through the
offline pipeline with every key's encoder; ``baton record`` on a dict env; and a masked dataset (Taxi) whose
acting and targets take legal actions only."""
from __future__ import annotations

import copy
import doctest
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("minari")

from data.obs import leaves, to_tensor  # noqa: E402
from data.offline import DatasetError, DatasetSpaceError, Episode, open_dataset, write_dataset  # noqa: E402
from data.offline.dataset import FLAT_DIR  # noqa: E402
from pipelines import build_pipeline, serial_pipeline  # noqa: E402

#: a nested Dict: a uint8 image large enough for Minari to call it an image (it would JPEG it), a float64 vector
#: (read back as float32) and a Discrete key (int64)
ROBOT = gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (32, 32, 3), np.uint8),
                         "arm": gym.spaces.Dict({"joints": gym.spaces.Box(-1.0, 1.0, (3,), np.float64),
                                                 "mode": gym.spaces.Discrete(4)})})
PAIR = gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Discrete(3)))
ACT = gym.spaces.Discrete(2)


def _rows(space, n, rng):
    """``n`` random observations of ``space``, nested as the space (a Tuple as a tuple)."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _rows(sub, n, rng) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_rows(sub, n, rng) for sub in space.spaces)
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, int(space.n), n)
    if space.dtype == np.uint8:
        return rng.integers(0, 256, (n,) + space.shape).astype(np.uint8)
    return rng.uniform(space.low, space.high, (n,) + space.shape).astype(space.dtype)


def _episodes(space, action_space, n=4, seed=0, steps=None):
    """Episode i: ``steps`` or 3 + i steps of random observations and actions, terminated when i is even."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = steps or 3 + i
        end = np.zeros(t, bool)
        end[-1] = True
        actions = (rng.integers(0, int(action_space.n), t) if isinstance(action_space, gym.spaces.Discrete)
                   else rng.uniform(action_space.low, action_space.high, (t,) + action_space.shape).astype(np.float32))
        out.append(Episode(_rows(space, t + 1, rng), actions, rng.normal(size=t).astype(np.float32),
                           end if i % 2 == 0 else np.zeros(t, bool), np.zeros(t, bool) if i % 2 == 0 else end))
    return out


def _leaves(observations):
    return [(path, leaf.numpy()) for path, leaf in leaves(to_tensor(observations))]


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "datasets")


# ---- the dataset --------------------------------------------------------------------------------------------
def test_a_nested_dict_dataset_round_trips_every_leaf_exactly(root):
    episodes = _episodes(ROBOT, ACT)
    write_dataset("dict/robot-v0", episodes, ROBOT, ACT, root=root)
    ds = open_dataset("dict/robot-v0", root)
    for ep, back in zip(episodes, ds.episodes()):
        assert [p for p, _ in _leaves(back.observations)] == [("arm", "joints"), ("arm", "mode"), ("camera",)]
        for (path, a), (_, b) in zip(_leaves(ep.observations), _leaves(back.observations)):
            assert a.dtype == b.dtype and np.array_equal(a, b), path  # the camera too: stored raw, not as JPEG


def test_minari_reads_a_dict_dataset_baton_wrote(root, monkeypatch):
    """Minari's layout: a group per key, so Minari's own reader gives the dict back."""
    import minari

    write_dataset("dict/minari-v0", _episodes(ROBOT, ACT, n=2), ROBOT, ACT, root=root)
    monkeypatch.setenv("MINARI_DATASETS_PATH", root)
    ep = minari.load_dataset("dict/minari-v0")[1]
    assert ep.observations["camera"].shape == (5, 32, 32, 3) and ep.observations["arm"]["mode"].shape == (5,)


def test_transitions_give_a_tree_whose_leaves_keep_their_dtype(root):
    episodes = _episodes(ROBOT, ACT)
    write_dataset("dict/tree-v0", episodes, ROBOT, ACT, root=root)
    tr = open_dataset("dict/tree-v0", root).transitions([1, 2])
    obs, next_obs = tr["obs"], tr["next_obs"]
    assert obs["camera"].dtype == torch.uint8 and obs["camera"].shape == (4 + 5, 32, 32, 3)
    assert obs["arm"]["joints"].dtype == torch.float32 and obs["arm"]["mode"].dtype == torch.int64
    for path, leaf in leaves(obs):  # episode 1's first 4 rows, then episode 2's first 5
        source = [dict(_leaves(episodes[i].observations))[path] for i in (1, 2)]
        want = np.concatenate([source[0][:4], source[1][:5]])
        assert np.array_equal(leaf.numpy(), want.astype(leaf.numpy().dtype)), path
        after = np.concatenate([source[0][1:], source[1][1:]])  # next_obs: the row after, in its episode
        assert np.array_equal(dict(leaves(next_obs))[path].numpy(), after.astype(leaf.numpy().dtype)), path
    assert tr["action"].dtype == torch.int64 and len(tr["reward"]) == 9


@pytest.mark.parametrize("as_mapping", [False, True])
def test_a_tuple_dataset_round_trips_from_a_tuple_or_a_trees_keys(root, as_mapping):
    episodes = _episodes(PAIR, ACT, n=3)
    if as_mapping:  # a tree's keys, as baton record gathers them
        for ep in episodes:
            ep.observations = {str(i): v for i, v in enumerate(ep.observations)}
    write_dataset("dict/pair-v0", episodes, PAIR, ACT, root=root)
    ds = open_dataset("dict/pair-v0", root)
    back = next(ds.episodes())
    assert isinstance(back.observations, tuple) and back.observations[1].dtype == np.int64
    tr = ds.transitions()
    assert sorted(tr["obs"].keys()) == ["0", "1"] and tr["obs"]["0"].dtype == torch.float32
    first = episodes[0].observations
    assert np.array_equal(tr["obs"]["1"][:3].numpy(), np.asarray(first["1"] if as_mapping else first[1])[:3])


def test_the_flat_copy_is_a_file_per_leaf_and_is_rebuilt_when_stale(root):
    episodes = _episodes(ROBOT, ACT)
    path = write_dataset("dict/flat-v0", episodes, ROBOT, ACT, root=root)
    flat = os.path.join(os.path.dirname(path), FLAT_DIR)
    names = sorted(os.listdir(flat))
    assert [n for n in names if n.startswith("observations")] == [
        "observations.0.npy", "observations.1.npy", "observations.2.npy", "observations.json"]
    ds = open_dataset("dict/flat-v0", root)
    good = ds.transitions()["obs"]["camera"].clone()
    camera = np.load(os.path.join(flat, "observations.2.npy"))
    np.save(os.path.join(flat, "observations.2.npy"), np.zeros_like(camera))  # a copy gone wrong ...
    assert ds.transitions()["obs"]["camera"].sum() == 0   # ... is read while its stamp says it is fresh
    hdf5 = os.path.join(path, "main_data.hdf5")
    st = os.stat(hdf5)
    os.utime(hdf5, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # the HDF5 file changed: rebuilt
    assert torch.equal(open_dataset("dict/flat-v0", root).transitions()["obs"]["camera"], good)


def test_a_flat_dataset_keeps_its_flat_copy_layout(root):
    """The file names of a flat dataset's copy are the ones earlier versions wrote, so their copies stay valid."""
    obs = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    path = write_dataset("dict/plain-v0", _episodes(obs, ACT), obs, ACT, root=root)
    names = sorted(os.listdir(os.path.join(os.path.dirname(path), FLAT_DIR)))
    assert names == ["actions.npy", "lengths.npy", "observations.npy", "rewards.npy", "stamp.json",
                     "terminations.npy", "truncations.npy"]
    tr = open_dataset("dict/plain-v0", root).transitions()
    assert isinstance(tr["obs"], torch.Tensor) and tr["obs"].dtype == torch.float32


def test_an_episode_whose_leaves_disagree_names_the_leaf(root):
    ep = _episodes(ROBOT, ACT, n=1)[0]
    ep.observations["arm"]["joints"] = ep.observations["arm"]["joints"][:-1]
    with pytest.raises(DatasetError, match=r"3 rewards need 4 observations.*got 3 rows in "
                                           r"observation\['arm'\]\['joints'\]"):
        ep.check()
    with pytest.raises(DatasetError, match=r"observation\['arm'\]\['joints'\]"):
        write_dataset("dict/bad-v0", [ep], ROBOT, ACT, root=root)


def test_observations_that_do_not_fit_the_space_are_refused_naming_the_key(root):
    ep = _episodes(ROBOT, ACT, n=1)[0]
    del ep.observations["arm"]["mode"]
    with pytest.raises(DatasetError, match=r"episode 0: observation\['arm'\]: the observation space .* has keys "
                                           r"\['joints', 'mode'\], the episode's observations \['joints'\]"):
        write_dataset("dict/missing-v0", [ep], ROBOT, ACT, root=root)
    assert not os.path.exists(os.path.join(root, "dict", "missing-v0"))


def test_a_leaf_no_array_holds_is_refused_naming_the_key_and_the_fix(root):
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "note": gym.spaces.Text(8)})
    with pytest.raises(DatasetError, match=r"observation\['note'\] is a Text space.*FilterObservation"):
        write_dataset("dict/text-v0", _episodes(ROBOT, ACT, n=1), space, ACT, root=root)


def test_spaces_are_compared_key_by_key_naming_the_key_that_differs(root):
    write_dataset("dict/spaces-v0", _episodes(ROBOT, ACT, n=2), ROBOT, ACT, root=root)
    ds = open_dataset("dict/spaces-v0", root)
    other_bounds = copy.deepcopy(ROBOT)
    other_bounds["arm"]["joints"] = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)  # bounds and dtype may differ
    ds.check_spaces(other_bounds, ACT, "env X")
    wider = copy.deepcopy(ROBOT)
    wider["arm"]["joints"] = gym.spaces.Box(-1.0, 1.0, (4,), np.float64)
    with pytest.raises(DatasetSpaceError, match=r"observation space.*env X has .*\(observation\['arm'\]\['joints'\] "
                                                r"is Box\(.*\(3,\).*\) in the dataset, Box\(.*\(4,\).*\) in the env\)"):
        ds.check_spaces(wider, ACT, "env X")
    fewer = gym.spaces.Dict({"camera": ROBOT["camera"], "arm": gym.spaces.Dict({"joints": ROBOT["arm"]["joints"]})})
    with pytest.raises(DatasetSpaceError, match=r"observation\['arm'\] has keys \['joints', 'mode'\] in the dataset, "
                                                r"\['joints'\] in the env"):
        ds.check_spaces(fewer, ACT, "env X")
    modes = copy.deepcopy(ROBOT)
    modes["arm"]["mode"] = gym.spaces.Discrete(5)
    with pytest.raises(DatasetSpaceError, match=r"observation\['arm'\]\['mode'\] is Discrete\(4\)"):
        ds.check_spaces(modes, ACT, "env X")
    with pytest.raises(DatasetSpaceError, match="observation space"):
        ds.check_spaces(gym.spaces.Box(-1, 1, (3,)), ACT, "env X")


def test_the_dataset_module_examples_run():
    import data.offline.dataset as module

    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted >= 8


# ---- learning from a dict dataset through the offline pipeline ------------------------------------------------
def _offline(tmp_path, algo, env_type, dataset, root, env=None, policy=None, iters=6):
    main = dict(exp_name=str(tmp_path / algo), log=dict(progress=False), dataset=dict(name=dataset, root=root),
                env=dict(evaluator_env_num=1, n_evaluator_episode=1, stop_value=float("inf"), **(env or {})),
                policy=dict(learn=dict(batch_size=16, update_per_iter=3), eval=dict(evaluator=dict(eval_freq=9)),
                            **(policy or {})))
    return build_pipeline((main, dict(env=dict(type=env_type), policy=dict(type=algo))), max_train_iter=iters)


def _encoders(module):
    from policies.encoders import MultiInputEncoder

    return [m for m in module.modules() if isinstance(m, MultiInputEncoder)]


def _encoder_weights(module):
    return {f"{i}.{name}": p.detach().clone() for i, enc in enumerate(_encoders(module))
            for name, p in enc.named_parameters()}


@pytest.fixture(scope="module")
def camera_dataset(tmp_path_factory):
    """``dict/camera-v0``: random episodes on CameraReach-v0's spaces (a uint8 ``camera``, a float ``position``)."""
    from dizoo.multisensor.envs import CameraReachEnv

    env = CameraReachEnv()
    root = str(tmp_path_factory.mktemp("camera") / "datasets")
    write_dataset("dict/camera-v0", _episodes(env.observation_space, env.action_space, n=6), env.observation_space,
                  env.action_space, root=root)
    return root


@pytest.mark.parametrize("algo", ["bc", "cql"])
def test_bc_and_cql_learn_from_a_dict_dataset_moving_every_keys_encoder(camera_dataset, tmp_path, algo, caplog):
    caplog.set_level("INFO", logger="middleware.offline")
    pipeline = _offline(tmp_path, algo, "camera_reach", "dict/camera-v0", camera_dataset,
                        policy=dict(model=dict(encoders=dict(position=dict(hidden_sizes=[8])))))
    model = pipeline.policy.model
    (encoder,) = _encoders(model)
    assert encoder.paths == [("camera",), ("position",)] and encoder.out_dims[1] == 8  # policy.model.encoders
    before = _encoder_weights(model)
    summary = pipeline.run()
    assert summary["train_iter"] == 6 and summary["shard_transitions"] == open_dataset(
        "dict/camera-v0", camera_dataset).total_steps and summary["evaluations"] >= 1
    assert any(r.getMessage().endswith(")") and "into the replay storage (cpu)" in r.getMessage()
               for r in caplog.records)  # the fetcher names the device of a tree's leaves
    stored = pipeline.buffer.storage.fields  # the shard in the replay storage: the image stays uint8
    assert stored["obs"]["camera"].dtype == torch.uint8 and stored["next_obs"]["position"].dtype == torch.float32
    after = _encoder_weights(model)
    moved = {name.split(".")[2] for name in before if not torch.equal(before[name], after[name])}
    assert moved == {"0", "1"}  # leaves.0 (the camera's CNN) and leaves.1 (the position's MLP) both learned


@pytest.fixture(scope="module")
def bits_dataset(tmp_path_factory):
    """``dict/bits-v0``: random episodes on BitFlipping-v0 with 4 bits and continuous actions."""
    from dizoo.goal.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4, continuous=True)
    root = str(tmp_path_factory.mktemp("bits") / "datasets")
    write_dataset("dict/bits-v0", _episodes(env.observation_space, env.action_space, n=6), env.observation_space,
                  env.action_space, root=root)
    return root


@pytest.mark.parametrize("algo", ["td3bc", "bc"])
def test_td3bc_and_continuous_bc_learn_from_a_dict_dataset(bits_dataset, tmp_path, algo):
    small = (dict(model=dict(actor_head_hidden_size_list=[32], critic_head_hidden_size_list=[32])) if algo == "td3bc"
             else dict(model=dict(hidden_size_list=[32])))
    pipeline = _offline(tmp_path, algo, "bit_flipping", "dict/bits-v0", bits_dataset, policy=small,
                        env=dict(env_kwargs=dict(n_bits=4, continuous=True), max_episode_steps=4))
    model = pipeline.policy.model
    assert len(_encoders(model)) == (2 if algo == "td3bc" else 1)  # TD3+BC: the actor's and the critics' own
    before = _encoder_weights(model)
    assert pipeline.run()["train_iter"] == 6
    after = _encoder_weights(model)
    moved = {name.split(".")[0] for name in before if not torch.equal(before[name], after[name])}
    assert moved == ({"0", "1"} if algo == "td3bc" else {"0"})
    obs = to_tensor({k: np.zeros((3, 4), np.float32) for k in ("observation", "achieved_goal", "desired_goal")})
    action = pipeline.policy.eval_mode.forward(obs)["action"]
    assert action.shape == (3, 4) and bool((action.abs() <= 1).all())


# ---- baton record on a dict env ------------------------------------------------------------------------------
def _short_trained(tmp_path, algo, env_id, **env):
    """A checkpoint of ``algo`` trained for a few hundred env steps on ``env_id``, with its config."""
    from commands.algo_env import build_config

    main, create = build_config(algo, env_id)
    main.update(exp_name=str(tmp_path / f"{algo}_teacher"), log=dict(progress=False))
    main["env"].update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1, **env)
    main["policy"] = dict(collect=dict(n_sample=32), learn=dict(batch_size=16), eval=dict(evaluator=dict(eval_freq=8)))
    summary = serial_pipeline((copy.deepcopy(main), copy.deepcopy(create)), max_env_step=256)
    return os.path.join(summary["run_dir"], "ckpt", "latest.pth.tar"), main, create


def test_baton_record_writes_a_camera_dataset_that_bc_learns_from(tmp_path):
    from commands.record import record_dataset

    ckpt, main, create = _short_trained(tmp_path, "dqn", "CameraReach-v0")
    root = str(tmp_path / "datasets")
    report = record_dataset((main, create), ckpt, 5, "rec/camera-v0", eps=0.3, seed=3, root=root, num_envs=2)
    ds = open_dataset("rec/camera-v0", root)
    assert report["episodes"] == ds.n_episodes == 5 and report["transitions"] == ds.total_steps
    for ep in ds.episodes():
        camera, position = ep.observations["camera"], ep.observations["position"]
        assert camera.dtype == np.uint8 and camera.shape == (len(ep) + 1, 8, 8, 3) and position.dtype == np.float32
        target = np.argwhere(camera[0, ..., 0] == 255)[0]
        reached = np.array_equal(np.rint(position[-1] * 7).astype(int), target)  # the real final observation
        assert bool(ep.terminations[-1]) == reached and (ep.terminations | ep.truncations).sum() == 1
    assert 0 < report["terminated"] < 5  # both endings occur, so the check above could fail either way
    record_dataset((main, create), ckpt, 5, "rec/camera-v0", eps=0.3, seed=3, root=str(tmp_path / "again"),
                   num_envs=2)
    first, second = (open_dataset("rec/camera-v0", r).transitions() for r in (root, str(tmp_path / "again")))
    for (path, a), (_, b) in zip(leaves(first["obs"]), leaves(second["obs"])):  # the same command, the same data
        assert torch.equal(a, b), path
    pipeline = _offline(tmp_path, "bc", "camera_reach", "rec/camera-v0", root)
    assert pipeline.run()["train_iter"] == 6


def test_record_refuses_a_leaf_no_dataset_stores_naming_the_key():
    from commands.record import _check_recordable

    _check_recordable(ROBOT, "Robot-v0")  # a nested dict of arrays: recordable
    graph = gym.spaces.Dict({"graph": gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), None)})
    with pytest.raises(DatasetError, match=r"env Graph-v0: observation\[.graph.\] is a Graph space.*to a Box"):
        _check_recordable(graph, "Graph-v0")


# ---- a masked dataset: Taxi ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def taxi(tmp_path_factory):
    """``rec/taxi-v0``: 4 Taxi-v4 episodes of a briefly trained DQN at eps 0.5, recorded with ``baton record``
    (observation ``{"observation": Discrete(500), "action_mask": int8[6]}``)."""
    from commands.record import record_dataset

    tmp = tmp_path_factory.mktemp("taxi")
    ckpt, main, create = _short_trained(tmp, "dqn", "Taxi-v4")
    root = str(tmp / "datasets")
    main["env"]["max_episode_steps"] = 40
    record_dataset((main, create), ckpt, 4, "rec/taxi-v0", eps=0.5, seed=0, root=root, num_envs=2)
    return root


def _all_taxi_states():
    """Every Taxi state with its legal-action mask, as the observation tree the policies act on."""
    env = gym.make("Taxi-v4").unwrapped
    masks = np.stack([env.action_mask(s) for s in range(500)]).astype(np.int8)
    return to_tensor({"observation": np.arange(500), "action_mask": masks}), masks.astype(bool)


def test_a_recorded_masked_dataset_holds_its_masks_and_legal_actions_only(taxi):
    ds = open_dataset("rec/taxi-v0", taxi)
    assert sorted(ds.observation_space.keys()) == ["action_mask", "observation"]
    tr = ds.transitions()
    mask, action = tr["obs"]["action_mask"], tr["action"]
    assert mask.dtype == torch.int8 and tr["obs"]["observation"].dtype == torch.int64
    assert bool(mask[torch.arange(len(action)), action].all())  # eps's random actions were legal ones too


@pytest.mark.parametrize("algo", ["cql", "bc"])
def test_acting_on_a_masked_dataset_never_takes_an_illegal_action(taxi, tmp_path, algo):
    """Trained a few updates (its evaluation on a checked env: an illegal action would raise), then greedy and
    eps-greedy on all 500 states: every action legal, where the unmasked argmax is not."""
    pipeline = _offline(tmp_path, algo, "taxi", "rec/taxi-v0", taxi, env=dict(action_mask_check=True))
    assert pipeline.run()["evaluations"] >= 1
    policy = pipeline.policy
    obs, legal = _all_taxi_states()
    rows = np.arange(500)
    with torch.no_grad():
        unmasked = policy.model(to_tensor({"observation": torch.arange(500),
                                           "action_mask": torch.ones(500, 6, dtype=torch.int8)})).argmax(-1).numpy()
    assert not legal[rows, unmasked].all()  # the network alone would pick illegal actions: the mask decides
    greedy = policy.eval_mode.forward(obs)["action"].numpy()
    assert legal[rows, greedy].all()
    for _ in range(3):
        explored = policy.collect_mode.forward(obs, eps=0.7)["action"].numpy()
        assert legal[rows, explored].all() and (explored != greedy).any()


def test_cqls_target_takes_the_best_legal_next_action_and_its_penalty_the_legal_ones():
    """Only action 2 is legal in every next state: the target bootstraps from the target net's value of action 2,
    whatever the nets rate higher; only actions 0 and 2 are legal in the states: the penalty's soft maximum is
    over those two."""
    from easydict import EasyDict

    from data.batch import make_batch
    from policies.cql import DiscreteCQLPolicy

    space = gym.spaces.Dict({"observation": gym.spaces.Discrete(500),
                             "action_mask": gym.spaces.Box(0, 1, (6,), np.int8)})
    torch.manual_seed(0)
    policy = DiscreteCQLPolicy(EasyDict(DiscreteCQLPolicy.default_config()), space, gym.spaces.Discrete(6))
    next_mask, mask = torch.zeros(32, 6, dtype=torch.int8), torch.zeros(32, 6, dtype=torch.int8)
    next_mask[:, 2] = 1
    mask[:, [0, 2]] = 1
    states = torch.arange(32)
    obs = make_batch({"observation": states, "action_mask": mask})
    next_obs = make_batch({"observation": states + 100, "action_mask": next_mask})
    batch = make_batch(dict(obs=obs, next_obs=next_obs, action=torch.zeros(32, dtype=torch.long),
                            reward=torch.zeros(32), terminated=torch.zeros(32, dtype=torch.bool)))
    with torch.no_grad():
        q_next, q = policy._target_model(next_obs), policy.model(obs)
    assert (q_next.argmax(-1) != 2).any()  # unmasked, the target would differ
    out = policy.learn_mode.forward(batch)
    assert float(out["target_q"]) == pytest.approx(float(policy._gamma * q_next[:, 2].mean()), rel=1e-5)
    penalty = (torch.logsumexp(q[:, [0, 2]], dim=1) - q[:, 0]).mean()
    assert float(out["cql_loss"]) == pytest.approx(float(penalty), rel=1e-5)
