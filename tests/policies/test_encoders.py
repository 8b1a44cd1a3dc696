"""policies.encoders: per-key encoders of Dict and Tuple observations, the torso built on them, and the running
normalisation of their vector keys."""
from __future__ import annotations

import doctest

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

import policies.encoders as encoders_module
from data.batch import ttorch
from engine.config import ConfigError
from policies.encoders import EncoderParams, MultiInputEncoder, build_torso, plan_encoders
from policies.key_encoders import CategoricalEncoder, DenseEncoder
from policies.keyed_obs_norm import KeyedObsNorm, normalisable_paths
from policies.models import encoder
from policies.noisy import NoisyLinear
from policies.normalisation import Normalisation


def _only(space: gym.Space, settings: dict | None = None) -> MultiInputEncoder:
    """The encoder of a Dict with ``space`` as its one key, "x"."""
    return MultiInputEncoder(spaces.Dict({"x": space}), {"x": settings} if settings else None)


def _convs(module: nn.Module) -> list:
    return [m for m in module.modules() if isinstance(m, nn.Conv2d)]


def _linears(module: nn.Module) -> list:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


MIXED = spaces.Dict({
    "image": spaces.Box(0, 255, (7, 7, 3), np.uint8),
    "vec": spaces.Box(-1.0, 1.0, (5,), np.float32),
    "room": spaces.Discrete(3, start=-1),
    "keys": spaces.MultiDiscrete([2, 3]),
    "bits": spaces.MultiBinary(4),
    "nest": spaces.Dict({"grid": spaces.Box(-1.0, 1.0, (2, 3), np.float32)}),
    "pair": spaces.Tuple((spaces.Discrete(2), spaces.Box(0.0, 1.0, (1,), np.float32))),
    "action_mask": spaces.MultiBinary(3),
})


def _mixed_batch(batch: int = 4, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"image": torch.randint(0, 256, (batch, 7, 7, 3), generator=g, dtype=torch.uint8),
            "vec": torch.rand(batch, 5, generator=g) * 2 - 1,
            "room": torch.randint(-1, 2, (batch,), generator=g),
            "keys": torch.stack([torch.randint(0, 2, (batch,), generator=g),
                                 torch.randint(0, 3, (batch,), generator=g)], 1),
            "bits": torch.randint(0, 2, (batch, 4), generator=g, dtype=torch.int8),
            "nest": {"grid": torch.rand(batch, 2, 3, generator=g)},
            "pair": {"0": torch.randint(0, 2, (batch,), generator=g), "1": torch.rand(batch, 1, generator=g)},
            "action_mask": torch.ones(batch, 3, dtype=torch.int8)}


# ---- which encoder each space gets -------------------------------------------------------------------------------


@pytest.mark.parametrize("space, settings, kind, out_dim", [
    (spaces.Box(-1, 1, (3,)), None, "mlp", 64),
    (spaces.Box(-1, 1, (3,)), {"hidden_sizes": [8, 5]}, "mlp", 5),
    (spaces.Box(-1, 1, (3,)), {"hidden_sizes": []}, "flatten", 3),
    (spaces.Box(-1, 1, (2, 3)), None, "mlp", 64),
    (spaces.Box(-1, 1, (2, 3)), {"type": "flatten"}, "flatten", 6),
    (spaces.Box(-1, 1, ()), {"hidden_sizes": []}, "flatten", 1),
    (spaces.Box(0.0, 1.0, (3, 8, 8)), {"hidden_sizes": []}, "flatten", 192),  # float: not taken for an image
    (spaces.Box(0, 255, (7, 7, 3), np.uint8), {"hidden_sizes": []}, "cnn", 64),  # 7 -> 5 -> 3 -> 1
    (spaces.Box(0, 255, (7, 7, 3), np.uint8), None, "cnn", 64),
    (spaces.Box(0, 255, (8, 8, 8), np.uint8), {"hidden_sizes": []}, "flatten", 512),  # 8 channels: no image
    (spaces.Box(0.0, 1.0, (3, 8, 8)), {"type": "cnn", "hidden_sizes": []}, "cnn", 64 * 2 * 2),
    (spaces.Discrete(5), None, "embedding", 16),
    (spaces.Discrete(5), {"embedding_dim": 3}, "embedding", 3),
    (spaces.Discrete(5), {"type": "flatten"}, "flatten", 5),
    (spaces.Discrete(5), {"type": "mlp", "hidden_sizes": [7]}, "mlp", 7),
    (spaces.MultiDiscrete([2, 3, 4]), None, "embedding", 48),
    (spaces.MultiDiscrete([[2, 3], [4, 5]]), {"embedding_dim": 2}, "embedding", 8),
    (spaces.MultiDiscrete([2, 3]), {"type": "flatten"}, "flatten", 5),
    (spaces.MultiBinary(4), None, "flatten", 4),
    (spaces.MultiBinary([2, 3]), {"type": "mlp", "hidden_sizes": [9]}, "mlp", 9),
])
def test_each_space_kind_gets_its_encoder_and_output_size(space, settings, kind, out_dim):
    enc = _only(space, settings)
    assert enc.plans[0].kind == kind
    assert enc.out_dim == out_dim
    batch = torch.as_tensor(np.stack([space.sample() for _ in range(3)]))
    assert enc({"x": batch}).shape == (3, out_dim)
    leaf = enc.leaves[0]
    expected = CategoricalEncoder if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)) else DenseEncoder
    assert type(leaf) is expected
    assert bool(_convs(leaf)) == (kind == "cnn")
    assert any(isinstance(m, nn.Embedding) for m in leaf.modules()) == (kind == "embedding")


def test_a_box_mlp_flattens_its_values_into_the_first_layer():
    enc = _only(spaces.Box(-1, 1, (2, 3)), {"hidden_sizes": [4]})
    assert [(m.in_features, m.out_features) for m in _linears(enc)] == [(6, 4)]


@pytest.mark.parametrize("shape, nature", [((7, 7, 3), False), ((2, 2, 1), False), ((3, 40, 40), False),
                                          ((4, 64, 64), True), ((84, 84, 3), True)])
def test_small_images_get_a_3x3_stack_and_large_ones_the_nature_cnn(shape, nature):
    enc = _only(spaces.Box(0, 255, shape, np.uint8), {"hidden_sizes": []})
    convs = _convs(enc)
    assert [c.kernel_size for c in convs] == ([(8, 8), (4, 4), (3, 3)] if nature else [(3, 3)] * 3)
    assert convs[0].in_channels == (shape[0] if shape[0] <= 4 else shape[-1])
    out = enc({"x": torch.randint(0, 256, (2,) + shape, dtype=torch.uint8)})
    assert out.shape == (2, enc.out_dim) and enc.out_dim > 0


def test_channels_last_images_are_permuted_to_channels_first():
    torch.manual_seed(0)
    last = _only(spaces.Box(0, 255, (9, 7, 3), np.uint8))
    torch.manual_seed(0)
    first = _only(spaces.Box(0, 255, (3, 9, 7), np.uint8))
    assert last.plans[0].channels_last and not first.plans[0].channels_last
    image = torch.randint(0, 256, (2, 9, 7, 3), dtype=torch.uint8)
    expected = first({"x": image.permute(0, 3, 1, 2)})
    assert torch.allclose(last({"x": image}), expected, atol=1e-6)
    # a reshape instead of the permute would mix pixels and channels
    assert not torch.allclose(first({"x": image.reshape(2, 3, 9, 7)}), expected, atol=1e-3)


def test_uint8_images_are_scaled_by_1_over_255_unless_normalise_is_false():
    torch.manual_seed(0)
    scaled = _only(spaces.Box(0, 255, (7, 7, 3), np.uint8))
    torch.manual_seed(0)
    raw = _only(spaces.Box(0, 255, (7, 7, 3), np.uint8), {"normalise": False})
    assert scaled.plans[0].scaled and not raw.plans[0].scaled
    image = torch.randint(0, 256, (2, 7, 7, 3), dtype=torch.uint8)
    assert torch.allclose(scaled({"x": image}), raw({"x": image.float() / 255}), atol=1e-6)
    assert not torch.allclose(scaled({"x": image}), raw({"x": image}), atol=1e-3)


def test_a_uint8_vector_is_scaled_and_normalise_true_scales_a_float_box_by_its_bounds():
    pixels = _only(spaces.Box(0, 255, (3,), np.uint8), {"hidden_sizes": []})
    assert torch.allclose(pixels({"x": torch.tensor([[0, 51, 255]], dtype=torch.uint8)}),
                          torch.tensor([[0.0, 0.2, 1.0]]))
    bounded = _only(spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32), dtype=np.float32),
                    {"hidden_sizes": [], "normalise": True})
    assert torch.allclose(bounded({"x": torch.tensor([[0.0, 5.0]])}), torch.tensor([[0.5, 0.5]]))
    plain = _only(spaces.Box(-2.0, 2.0, (2,)), {"hidden_sizes": []})
    assert torch.equal(plain({"x": torch.tensor([[0.0, 5.0]])}), torch.tensor([[0.0, 5.0]]))


def test_normalise_true_is_refused_without_finite_bounds_or_on_a_discrete_key():
    with pytest.raises(ValueError, match=r"observation\['x'\].*bounds are not all finite"):
        _only(spaces.Box(-np.inf, np.inf, (2,)), {"normalise": True})
    with pytest.raises(ValueError, match=r"encoders\.x\.normalise=True.*not a Box"):
        _only(spaces.Discrete(3), {"normalise": True})


def test_discrete_embedding_subtracts_the_space_start():
    enc = _only(spaces.Discrete(3, start=-1), {"embedding_dim": 4})
    table = enc.leaves[0].embedding.weight
    assert table.shape == (3, 4)
    out = enc({"x": torch.tensor([-1, 0, 1])})
    assert torch.equal(out, table[[0, 1, 2]])
    with pytest.raises(IndexError):
        enc({"x": torch.tensor([2])})  # 2 - (-1) = 3: outside the 3 rows


def test_multidiscrete_has_one_table_per_component_with_its_start():
    enc = _only(spaces.MultiDiscrete([2, 3], start=[1, -1]), {"embedding_dim": 2})
    table = enc.leaves[0].embedding.weight  # rows 0-1: the first component, 2-4: the second
    out = enc({"x": torch.tensor([[1, -1], [2, 1]])})
    assert torch.equal(out, torch.cat([table[[0, 2]].reshape(1, 4), table[[1, 4]].reshape(1, 4)]))
    hot = _only(spaces.MultiDiscrete([2, 3], start=[1, -1]), {"type": "flatten"})
    assert torch.equal(hot({"x": torch.tensor([[2, 0]])}), torch.tensor([[0.0, 1.0, 0.0, 1.0, 0.0]]))


def test_multibinary_is_flattened_as_floats():
    enc = _only(spaces.MultiBinary([2, 2]))
    out = enc({"x": torch.tensor([[[1, 0], [0, 1]]], dtype=torch.int8)})
    assert out.dtype == torch.float32 and torch.equal(out, torch.tensor([[1.0, 0.0, 0.0, 1.0]]))


# ---- nesting, order, the action mask -----------------------------------------------------------------------------


def test_nested_dicts_and_tuples_are_encoded_key_by_key_in_the_space_order():
    enc = MultiInputEncoder(MIXED, {"nest": {"grid": {"hidden_sizes": [8]}}, "pair": {"0": {"embedding_dim": 4}},
                                    "vec": {"hidden_sizes": []}})
    assert enc.paths == [("bits",), ("image",), ("keys",), ("nest", "grid"), ("pair", "0"), ("pair", "1"),
                         ("room",), ("vec",)]
    assert enc.out_dims == [4, 64, 32, 8, 4, 64, 16, 5]
    assert enc({k: v for k, v in _mixed_batch().items()}).shape == (4, enc.out_dim) and enc.out_dim == 197
    # the features of each key sit where out_dims says: only the "vec" slice follows the vec values
    batch, other = _mixed_batch(), _mixed_batch()
    other["vec"] = other["vec"] + 1
    changed = (enc(batch) != enc(other)).any(0)
    assert changed.nonzero().flatten().tolist() == list(range(192, 197))


def test_a_top_level_tuple_is_keyed_by_position():
    space = spaces.Tuple((spaces.Discrete(2), spaces.Tuple((spaces.Box(-1, 1, (2,)),))))
    enc = MultiInputEncoder(space, {"1": {"0": {"hidden_sizes": [3]}}})
    assert enc.paths == [("0",), ("1", "0")] and enc.out_dim == 19
    out = enc(ttorch.Tensor({"0": torch.tensor([0, 1]), "1": {"0": torch.zeros(2, 2)}}))
    assert out.shape == (2, 19)


def test_the_action_mask_is_never_encoded_and_cannot_be_configured():
    enc = MultiInputEncoder(MIXED)
    assert ("action_mask",) not in enc.paths
    batch, masked = _mixed_batch(), _mixed_batch()
    masked["action_mask"] = torch.zeros(4, 3, dtype=torch.int8)
    assert torch.equal(enc(batch), enc(masked))
    del masked["action_mask"]
    assert torch.equal(enc(batch), enc(masked))
    with pytest.raises(ValueError, match="legal-action mask.*Remove policy.model.encoders.action_mask"):
        MultiInputEncoder(MIXED, {"action_mask": {"type": "flatten"}})
    with pytest.raises(ValueError, match="no key to encode"):
        MultiInputEncoder(spaces.Dict({"action_mask": spaces.MultiBinary(3)}))
    # only the top-level key is the policy's mask: a nested one is an input like any other
    nested = MultiInputEncoder(spaces.Dict({"a": spaces.Dict({"action_mask": spaces.MultiBinary(3)})}))
    assert nested.paths == [("a", "action_mask")]


def test_leading_dims_are_kept():
    enc = MultiInputEncoder(MIXED)
    flat = _mixed_batch(batch=6)
    seq = {key: ({k: v.reshape((2, 3) + v.shape[1:]) for k, v in value.items()} if isinstance(value, dict)
                 else value.reshape((2, 3) + value.shape[1:])) for key, value in flat.items()}
    out = enc(seq)
    assert out.shape == (2, 3, enc.out_dim)
    assert torch.allclose(out.reshape(6, -1), enc(flat), atol=1e-6)


# ---- refused spaces and settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    spaces.Text(8),
    spaces.Graph(spaces.Box(-1, 1, (2,)), spaces.Discrete(2)),
    spaces.Sequence(spaces.Discrete(2)),
    spaces.OneOf((spaces.Discrete(2), spaces.Box(-1, 1, (2,)))),
])
def test_spaces_no_encoder_takes_are_refused_with_their_key_path_and_the_fix(bad):
    space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "task": spaces.Dict({"mission": bad})})
    with pytest.raises(ValueError) as info:
        MultiInputEncoder(space)
    message = str(info.value)
    assert "observation['task']['mission']" in message and type(bad).__name__ in message
    assert "gymnasium.wrappers.FilterObservation" in message and "encode it to a Box" in message


def test_an_encoder_for_a_key_the_space_lacks_names_the_closest_key():
    space = spaces.Dict({"image": spaces.Box(0, 255, (7, 7, 3), np.uint8), "inner": spaces.Dict(
        {"speed": spaces.Box(-1, 1, (1,))})})
    with pytest.raises(ValueError, match=r"no key observation\['imgae'\]; did you mean "
                                         r"'policy.model.encoders.image'\?"):
        MultiInputEncoder(space, {"imgae": {"type": "cnn"}})
    with pytest.raises(ValueError, match=r"observation\['inner'\]\['sped'\]; did you mean "
                                         r"'policy.model.encoders.inner.speed'\?"):
        MultiInputEncoder(space, {"inner": {"sped": {}}})
    with pytest.raises(ValueError, match=r"nested mappings.*policy.model.encoders.inner.speed.type"):
        MultiInputEncoder(space, {"inner.speed": {"hidden_sizes": [4]}})


@pytest.mark.parametrize("settings, error, words", [
    ({"x": {"typ": "cnn"}}, ConfigError, "policy.model.encoders.x.typ"),
    ({"x": {"type": "transformer"}}, ConfigError, "transformer"),
    ({"x": {"embedding_dim": 0}}, ConfigError, "policy.model.encoders.x.embedding_dim"),
    ({"x": {"hidden_sizes": [64, 0]}}, ConfigError, "policy.model.encoders.x.hidden_sizes"),
    ({"x": {"type": "embedding"}}, ValueError, "an embedding takes a Discrete"),
    ({"x": {"type": "cnn"}}, ValueError, "convolutions take a 3-dim Box"),
    ({"x": {"type": "mlp", "hidden_sizes": []}}, ValueError, "set type='flatten'"),
    ({"x": "cnn"}, ValueError, "a mapping of type, hidden_sizes"),
])
def test_bad_settings_name_their_config_key(settings, error, words):
    with pytest.raises(error, match=words):
        MultiInputEncoder(spaces.Dict({"x": spaces.Box(-1, 1, (3,))}), settings)


def test_a_nested_space_takes_its_settings_per_key():
    space = spaces.Dict({"outer": spaces.Dict({"inner": spaces.Box(-1, 1, (2,))})})
    with pytest.raises(ValueError, match=r"is a Dict space, so its encoders are set per key inside it, e\.g\. "
                                         r"policy.model.encoders.outer.inner.type=mlp"):
        MultiInputEncoder(space, {"outer": "mlp"})
    # a Dict key's own settings are its keys': EncoderParams' words there are keys it does not have
    with pytest.raises(ValueError, match=r"no key observation\['outer'\]\['type'\]"):
        MultiInputEncoder(space, {"outer": {"inner": {"type": "flatten"}, "type": "mlp"}})
    assert MultiInputEncoder(space, {"outer": {"inner": {"type": "flatten"}}}).out_dim == 2


def test_a_box_observation_is_not_planned_as_a_tree():
    with pytest.raises(ValueError, match="a Box takes policies.models.encoder"):
        MultiInputEncoder(spaces.Box(-1, 1, (3,)))


def test_encoder_params_declares_its_keys_with_docs_and_rules():
    params = EncoderParams.of({"type": "cnn", "hidden_sizes": [32], "normalise": True})
    assert (params.type, params.hidden_sizes, params.normalise, params.embedding_dim) == ("cnn", [32], True, 16)
    docs = EncoderParams.field_docs()
    assert set(docs) == {"type", "hidden_sizes", "normalise", "embedding_dim"} and all(docs.values())
    assert EncoderParams.of({}).normalise is None and EncoderParams.of({"normalise": False}).normalise is False


# ---- learning-relevant behaviour ---------------------------------------------------------------------------------


def test_gradients_reach_every_encoder():
    torch.manual_seed(0)
    enc = MultiInputEncoder(MIXED, {"pair": {"1": {"type": "mlp"}}})
    enc(_mixed_batch(batch=16)).pow(2).sum().backward()
    for path, leaf in zip(enc.paths, enc.leaves):
        grads = [p.grad for p in leaf.parameters()]
        if path == ("bits",):  # a flatten has no parameters
            assert not grads
            continue
        assert grads and all(g is not None and g.abs().sum() > 0 for g in grads), path


def test_a_treetensor_batch_gives_what_nested_dicts_give():
    enc = MultiInputEncoder(MIXED)
    batch = _mixed_batch()
    tree = ttorch.Tensor(batch)
    assert isinstance(tree["nest"], ttorch.Tensor)
    out = enc(tree)
    assert out.shape == (4, enc.out_dim) and torch.equal(out, enc(batch))
    with pytest.raises(KeyError, match=r"no observation\['nest'\]\['grid'\]"):
        enc(ttorch.Tensor({**batch, "nest": {"other": torch.zeros(4, 2, 3)}}))


def test_the_output_is_deterministic_for_a_seed():
    batch = _mixed_batch()
    outs = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        outs.append(MultiInputEncoder(MIXED)(batch))
    assert torch.equal(outs[0], outs[1])
    assert not torch.allclose(outs[0], outs[2])


def test_under_bf16_autocast_the_features_feed_a_head_and_learn():
    torch.manual_seed(0)
    enc = MultiInputEncoder(MIXED)
    head = nn.Linear(enc.out_dim, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        features = enc(ttorch.Tensor(_mixed_batch()))
        out = head(features)
    assert features.dtype in (torch.float32, torch.bfloat16) and torch.isfinite(features).all()
    assert out.shape == (4, 2)
    out.float().sum().backward()
    assert all(p.grad is not None for p in enc.parameters())
    assert torch.allclose(features.float(), enc(_mixed_batch()), atol=0.1, rtol=0.05)


@pytest.mark.parametrize("tree", [False, True])
def test_torch_compile_makes_one_graph_of_the_encoder(tree):
    torch._dynamo.reset()
    enc = MultiInputEncoder(MIXED)
    batch = ttorch.Tensor(_mixed_batch()) if tree else _mixed_batch()
    compiled = torch.compile(enc, backend="eager", fullgraph=not tree)
    assert torch.allclose(compiled(batch), enc(batch), atol=1e-6)
    assert torch._dynamo.explain(enc)(batch).graph_count == 1


# ---- the torso ---------------------------------------------------------------------------------------------------


def test_build_torso_fits_models_encoder_and_follows_the_encoders_with_an_mlp():
    torch.manual_seed(0)
    box, box_size = build_torso(spaces.Box(-1, 1, (4,)), None, [32, 16])
    torch.manual_seed(0)
    same, same_size = encoder((4,), [32, 16])
    x = torch.randn(3, 4)
    assert box_size == same_size == 16 and torch.equal(box(x), same(x))

    torso, size = build_torso(MIXED, {"vec": {"hidden_sizes": []}}, [32, 8])
    assert size == 8 and isinstance(torso[0], MultiInputEncoder)
    assert torso(ttorch.Tensor(_mixed_batch())).shape == (4, 8)
    assert _linears(torso[1])[0].in_features == torso[0].out_dim

    bare, bare_size = build_torso(MIXED, None, [])
    assert isinstance(bare, MultiInputEncoder) and bare_size == bare.out_dim

    noisy, _ = build_torso(MIXED, None, [8], linear=NoisyLinear)
    assert not _linears(noisy) and sum(isinstance(m, NoisyLinear) for m in noisy.modules()) == 5  # 4 keys + torso

    with pytest.raises(ValueError, match="neither a Box nor a Dict or Tuple"):
        build_torso(spaces.Discrete(3), None, [8])


# ---- running normalisation of vector keys ------------------------------------------------------------------------


def test_only_vector_keys_that_are_not_scaled_are_normalised():
    space = spaces.Dict({"image": spaces.Box(0, 255, (7, 7, 3), np.uint8), "ram": spaces.Box(0, 255, (4,), np.uint8),
                         "vec": spaces.Box(-1, 1, (2,)), "room": spaces.Discrete(3), "bits": spaces.MultiBinary(2),
                         "n": spaces.Dict({"grid": spaces.Box(-1, 1, (2, 2))}), "action_mask": spaces.Box(0, 1, (3,)),
                         "bounded": spaces.Box(-1, 1, (2,))})
    assert normalisable_paths(space) == [("bounded",), ("n", "grid"), ("vec",)]
    # a key scaled by its bounds is not normalised again; a uint8 vector is normalised once it is not scaled
    assert normalisable_paths(space, {"bounded": {"normalise": True}}) == [("n", "grid"), ("vec",)]
    assert normalisable_paths(space, {"ram": {"normalise": False}}) == [("bounded",), ("n", "grid"), ("ram",),
                                                                        ("vec",)]
    with pytest.raises(ValueError, match="no vector key to normalise"):
        KeyedObsNorm(spaces.Dict({"room": spaces.Discrete(3)}))


def test_keyed_obs_norm_normalises_its_keys_and_leaves_the_rest_and_the_input_alone():
    space = spaces.Dict({"vec": spaces.Box(-10, 10, (2,)), "room": spaces.Discrete(3),
                         "n": spaces.Dict({"grid": spaces.Box(-10, 10, (1, 2))})})
    norm = KeyedObsNorm(space, clip=5.0)
    collected = {"vec": torch.tensor([[0.0, 1.0], [2.0, 3.0]]), "room": torch.tensor([0, 2]),
                 "n": {"grid": torch.tensor([[[1.0, 1.0]], [[3.0, 5.0]]])}}
    norm.observe(ttorch.Tensor(collected))
    assert torch.equal(norm(collected)["vec"], collected["vec"])  # nothing merged yet: the identity
    norm.merge()
    tree = ttorch.Tensor(collected)
    out = norm(tree)
    assert isinstance(out, ttorch.Tensor) and isinstance(out["n"], ttorch.Tensor)
    assert torch.allclose(out["vec"], torch.tensor([[-1.0, -1.0], [1.0, 1.0]]))
    assert torch.allclose(out["n"]["grid"], torch.tensor([[[-1.0, -1.0]], [[1.0, 1.0]]]))
    assert out["room"] is tree["room"]
    assert torch.equal(tree["vec"], collected["vec"])  # the raw observations stay (a replay buffer keeps them)
    big = norm({"vec": torch.tensor([[100.0, 100.0]]), "room": torch.tensor([1]),
                "n": {"grid": torch.zeros(1, 1, 2)}})
    assert torch.equal(big["vec"], torch.tensor([[5.0, 5.0]]))  # clipped

    frozen = norm.frozen()
    assert torch.equal(frozen(collected)["vec"], norm(collected)["vec"])
    fresh = KeyedObsNorm(space, clip=5.0)
    fresh.load_state_dict(norm.state_dict())
    assert torch.equal(fresh(collected)["n"]["grid"], out["n"]["grid"])


def test_keyed_obs_norm_serves_the_policy_normalisation_as_running_obs_norm_does():
    space = spaces.Dict({"vec": spaces.Box(-10, 10, (2,)), "room": spaces.Discrete(3)})
    stats = Normalisation(KeyedObsNorm(space))
    collect = stats.observing(lambda obs: obs)
    collect({"vec": torch.tensor([[0.0, 0.0], [2.0, 4.0]]), "room": torch.tensor([0, 1])})
    stats.merge()
    out = stats.norm_obs({"vec": torch.tensor([[2.0, 4.0]]), "room": torch.tensor([1])})
    assert torch.allclose(out["vec"], torch.tensor([[1.0, 1.0]]))
    other = Normalisation(KeyedObsNorm(space))
    other.load_acting_weights(stats.acting_weights())
    assert torch.equal(other.norm_obs({"vec": torch.tensor([[2.0, 4.0]]), "room": torch.tensor([1])})["vec"],
                       out["vec"])
    other.check_state(stats.state_dict())
    other.load_state_dict(stats.state_dict())


def test_the_plans_are_shared_by_the_encoder_and_the_normaliser():
    plans = plan_encoders(MIXED)
    assert [p.path for p in plans] == MultiInputEncoder(MIXED).paths
    assert {p.path: p.kind for p in plans}[("room",)] == "embedding"


def test_the_module_doctests_run():
    result = doctest.testmod(encoders_module)
    assert result.failed == 0 and result.attempted >= 10
