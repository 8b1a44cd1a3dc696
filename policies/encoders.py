"""Encoders of dictionary observations: one small network per key of a ``gymnasium.spaces.Dict`` (or ``Tuple``),
their features concatenated (``MultiInputEncoder``), and the torso a model builds on them (``build_torso``).

A Dict observation reaches a model as a DI-treetensor tree (``data.batch.ttorch.Tensor``) whose leaves are
``[B, ...]`` tensors; a ``Tuple`` arrives as a tree with keys ``"0"``, ``"1"``, ... A flat Box observation stays a
plain tensor and keeps ``policies.models.encoder``: ``build_torso`` hands a Box to it unchanged, so a model can
call ``build_torso`` for every space.

Each key is configured under ``policy.model.encoders`` (``EncoderParams``), by its key path written as nested
mappings, the shape a dotted override makes (``engine.overrides``)::

    policy.model.encoders = {"image": {"type": "cnn"}, "robot": {"arm": {"hidden_sizes": [128]}}}
    baton train ... policy.model.encoders.robot.arm.hidden_sizes=[128]

A key not configured gets ``EncoderParams()``, whose ``type="auto"`` chooses by the key's space:

============================  ======================================================================
space of the key              auto
============================  ======================================================================
Box, 3 dims, uint8, [C,H,W]   cnn: the Nature CNN from 64x64 up, a stack of three 3x3 convolutions
or [H,W,C] with C in 1..4     below (MiniGrid's 7x7x3); channels-last is permuted inside
Box, other shapes             mlp: flattened, then ``hidden_sizes``; flatten when that is []
Discrete(n, start)            embedding: ``nn.Embedding(n, embedding_dim)`` of ``x - start``
MultiDiscrete                 embedding: one table per component (one ``nn.Embedding``, offset rows)
MultiBinary                   flatten: the bits as floats
Dict, Tuple                   each of its keys, recursively
Text, Graph, Sequence, OneOf  refused (ValueError naming the key path and the fix)
============================  ======================================================================

A uint8 Box is scaled into [0, 1] by its bounds (``(x - low) / (high - low)``: 1/255 for pixels) unless
``normalise=False``; ``normalise=True`` scales any Box with finite bounds. The key ``action_mask`` at the top of
the observation is never encoded: it is the legal-action mask (PettingZoo's and baton's convention), which the
policy applies to the action logits; as an input feature it would let the network read which actions are legal
from the mask instead of from the state, and a policy acting on the mask alone would learn nothing general.

Running normalisation of vector keys (``policy.obs_norm``) is ``policies.keyed_obs_norm.KeyedObsNorm``: one ``RunningObsNorm`` per Box
key that the encoders neither treat as an image nor scale, with the interface ``policies.normalisation`` uses.
"""
from __future__ import annotations

import difflib
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from data.batch import ttorch
from data.obs import space_children
from engine.config import ConfigError

from .masks import ACTION_MASK_KEY  # the top-level key of the legal-action mask: never encoded
from .key_encoders import ENCODER_TYPES, EncoderParams, EncoderPlan, KeyPath, leaf_encoder
from .layers import Linear, encoder, mlp
from .spaces import is_structured

__all__ = ["EncoderParams", "ENCODER_TYPES", "ACTION_MASK_KEY", "MultiInputEncoder", "EncoderPlan", "plan_encoders",
           "build_torso", "key_label"]

#: where the encoders' settings sit in a config
CONFIG_PATH = "policy.model.encoders"
#: the fix a space no encoder takes is told
REFUSED_FIX = ("drop it with a gymnasium wrapper, e.g. gymnasium.wrappers.FilterObservation, or encode it to a Box "
               "(a gymnasium.ObservationWrapper)")

# ---- key paths ---------------------------------------------------------------------------------------------


def key_label(path: Sequence[str]) -> str:
    """``observation['outer']['inner']``: a key path as an error message names it (the tree's own keys; a Tuple's
    are "0", "1", ...)."""
    return "observation" + "".join(f"[{key!r}]" for key in path)


def _config_key(path: Sequence[str]) -> str:
    """``policy.model.encoders.outer.inner``: where a key path's settings sit in a config."""
    return ".".join((CONFIG_PATH,) + tuple(path))


def _leaves(space: gym.Space, path: KeyPath = ()) -> Iterator[Tuple[KeyPath, gym.Space]]:
    """Every leaf space under ``space`` with its key path, depth first in the space's order: the fixed order in
    which features are concatenated. The top-level ``action_mask`` is left out (module docstring)."""
    for key, sub in space_children(space):
        if not path and key == ACTION_MASK_KEY:
            continue
        if is_structured(sub):
            yield from _leaves(sub, path + (key,))
        else:
            yield path + (key,), sub


def _space_at(space: gym.Space, path: KeyPath) -> gym.Space:
    for key in path:
        space = dict(space_children(space))[key]
    return space


@torch.compiler.disable
def _tree_leaves(obs: Any, paths: Sequence[KeyPath]) -> List[torch.Tensor]:
    """The tensors at ``paths`` of a ``ttorch.Tensor``, outside ``torch.compile``'s graph: dynamo cannot trace
    treevalue's lookups and would break the graph at each one; this way the encoders after it are one graph."""
    return [_leaf(obs, path) for path in paths]


def _leaf(obs: Any, path: KeyPath) -> torch.Tensor:
    """The tensor at ``path`` of a tree (a ``ttorch.Tensor`` or nested mappings)."""
    node = obs
    for key in path:
        try:
            node = node[key]
        except KeyError:
            raise KeyError(f"the observation batch has no {key_label(path)} (keys here: "
                           f"{', '.join(map(str, node.keys()))}): it does not match the observation space the "
                           f"encoder was built for") from None
    return node


# ---- settings per key ---------------------------------------------------------------------------------------


def _settings(space: gym.Space, encoders: Optional[Mapping[str, Any]]) -> Dict[KeyPath, EncoderParams]:
    """Each configured leaf's ``EncoderParams``, from the nested mapping ``policy.model.encoders``.

    Raises:
        ValueError: a key the space does not have (with the closest one), a nested key spelt with dots, the
            action mask, or settings that are not a mapping; ConfigError (a ValueError) for an unknown setting
            or a wrong value, naming its config key.
    """
    if encoders is not None and not isinstance(encoders, Mapping):
        raise ValueError(f"{CONFIG_PATH}={encoders!r}: the encoders' settings are a mapping from the observation's "
                         f"keys to their settings, e.g. {{'image': {{'type': 'cnn'}}}}")
    found: Dict[KeyPath, EncoderParams] = {}
    _collect_settings(space, encoders or {}, (), found)
    return found


def _collect_settings(space: gym.Space, given: Mapping[str, Any], path: KeyPath,
                      found: Dict[KeyPath, EncoderParams]) -> None:
    children = dict(space_children(space))
    for key, value in given.items():
        key = str(key)
        here = path + (key,)
        if not path and key == ACTION_MASK_KEY:
            raise ValueError(f"{_config_key(here)}: {key_label(here)} is the legal-action mask, which the policy "
                             f"applies to its actions; it is never encoded as an input. Remove "
                             f"{_config_key(here)}")
        if key not in children:
            raise ValueError(_unknown_key_message(here, list(children)))
        sub = children[key]
        if is_structured(sub):
            if not isinstance(value, Mapping):
                first = space_children(sub)[0][0] if space_children(sub) else "key"
                raise ValueError(f"{_config_key(here)}: {key_label(here)} is a {type(sub).__name__} space, so its "
                                 f"encoders are set per key inside it, e.g. {_config_key(here)}.{first}.type=mlp; "
                                 f"got {value!r}")
            _collect_settings(sub, value, here, found)
        elif isinstance(value, EncoderParams):
            found[here] = value
        elif isinstance(value, Mapping):
            found[here] = EncoderParams.of(value, path=_config_key(here))
        else:
            raise ValueError(f"{_config_key(here)}={value!r}: the settings of a key are a mapping of "
                             f"{', '.join(EncoderParams.defaults())}, e.g. {{'type': 'cnn'}}")


def _unknown_key_message(path: KeyPath, valid: List[str]) -> str:
    """A configured key the space lacks: the closest key, and the nested spelling when it was written with dots."""
    key = path[-1]
    msg = f"{_config_key(path)}: the observation space has no key {key_label(path)}"
    head = key.split(".")[0]
    if "." in key and head in valid:
        nested = ".".join(path[:-1] + tuple(key.split(".")))
        msg += (f"; a nested key is written as nested mappings, encoders={{{head!r}: {{...}}}} (the override "
                f"{CONFIG_PATH}.{nested}.type=...), not as one dotted key")
    else:
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        if close:
            msg += f"; did you mean {_config_key(path[:-1] + (close[0],))!r}?"
    return msg + f" Keys there: {', '.join(valid) or '(none)'}"


# ---- which encoder each key gets ----------------------------------------------------------------------------


def plan_encoders(observation_space: gym.Space, encoders: Optional[Mapping[str, Any]] = None) -> List[EncoderPlan]:
    """The encoder of every leaf key of a Dict or Tuple ``observation_space``, in concatenation order, with the
    settings of ``encoders`` (``policy.model.encoders``, nested mappings) and "auto" resolved. Separate from the
    modules so that the encoder and the normaliser (``KeyedObsNorm``) decide alike.

    Raises:
        ValueError: a space no encoder takes, a type its space cannot have, nothing to encode, or a bad
            ``encoders`` key (naming the key path and the fix).

    Examples:
        >>> space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,)), "room": gym.spaces.Discrete(4)})
        >>> [(p.path, p.kind) for p in plan_encoders(space, {"pos": {"hidden_sizes": []}})]
        [(('pos',), 'flatten'), (('room',), 'embedding')]
    """
    if not is_structured(observation_space):
        raise ValueError(f"encoders are planned for Dict or Tuple observation spaces, got {observation_space}; a "
                         f"Box takes policies.models.encoder")
    settings = _settings(observation_space, encoders)
    plans = [_plan(path, space, settings.get(path, EncoderParams())) for path, space in _leaves(observation_space)]
    if not plans:
        raise ValueError(f"the observation space {observation_space} has no key to encode (the top-level "
                         f"{ACTION_MASK_KEY!r} is the legal-action mask, never an input)")
    return plans


def _plan(path: KeyPath, space: gym.Space, settings: EncoderParams) -> EncoderPlan:
    """One leaf's encoder (module docstring's table)."""
    _check_hidden_sizes(path, settings.hidden_sizes)
    if isinstance(space, gym.spaces.Box):
        return _plan_box(path, space, settings)
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        if settings.normalise:
            raise ValueError(f"{_config_key(path)}.normalise=True: {key_label(path)} is {space}, not a Box; only "
                             f"a Box is scaled by its bounds. Remove the setting")
        binary = isinstance(space, gym.spaces.MultiBinary)
        kind = settings.type if settings.type != "auto" else ("flatten" if binary else "embedding")
        allowed = ("mlp", "flatten") if binary else ("embedding", "mlp", "flatten")
        if kind not in allowed:
            raise ValueError(f"{_config_key(path)}.type={kind!r}: {key_label(path)} is {space}, which takes "
                             f"{', '.join(map(repr, ('auto',) + allowed))}")
        _check_mlp_layers(path, kind, settings)
        return EncoderPlan(path, space, kind, settings)
    raise ValueError(f"{key_label(path)} is a {type(space).__name__} space ({space}), which baton cannot encode "
                     f"as a network input: {REFUSED_FIX}")


def _plan_box(path: KeyPath, space: gym.spaces.Box, settings: EncoderParams) -> EncoderPlan:
    shape = tuple(int(d) for d in space.shape)
    uint8 = space.dtype == np.uint8
    kind = settings.type
    if kind == "auto":
        kind = "cnn" if uint8 and _looks_like_image(shape) else ("mlp" if settings.hidden_sizes else "flatten")
    if kind == "embedding":
        raise ValueError(f"{_config_key(path)}.type='embedding': {key_label(path)} is {space}; an embedding takes "
                         f"a Discrete or MultiDiscrete key, a Box takes 'auto', 'cnn', 'mlp' or 'flatten'")
    if kind == "cnn" and len(shape) != 3:
        raise ValueError(f"{_config_key(path)}.type='cnn': {key_label(path)} is {space}, but convolutions take a "
                         f"3-dim Box ([C, H, W] or [H, W, C]); use 'mlp' or 'flatten'")
    _check_mlp_layers(path, kind, settings)
    scaled = uint8 if settings.normalise is None else settings.normalise
    if scaled and not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError(f"{_config_key(path)}.normalise=True: {key_label(path)} is {space}, whose bounds are not "
                         f"all finite, so it cannot be scaled by them; set normalise=False (policy.obs_norm "
                         f"normalises a vector key by its running statistics)")
    return EncoderPlan(path, space, kind, settings, scaled=bool(scaled),
                       channels_last=kind == "cnn" and _channels_last(shape))


def _looks_like_image(shape: Tuple[int, ...]) -> bool:
    """A 3-dim shape with 1 to 4 channels first or last (gray, RGB, RGBA, a stack of 4 frames)."""
    return len(shape) == 3 and (1 <= shape[0] <= 4 or 1 <= shape[-1] <= 4)


def _channels_last(shape: Tuple[int, ...]) -> bool:
    """[H, W, C] when only the last dim can be channels (1 to 4); channels-first otherwise (torch's layout and
    that of baton's frame stacks), which also decides a shape such as [3, 3, 3] that could be either."""
    return 1 <= shape[-1] <= 4 and not 1 <= shape[0] <= 4


def _check_hidden_sizes(path: KeyPath, sizes: Sequence[Any]) -> None:
    bad = [size for size in sizes if isinstance(size, bool) or not isinstance(size, int) or size < 1]
    if bad:
        raise ConfigError(f"config key '{_config_key(path)}.hidden_sizes' is {list(sizes)!r}: each layer's width "
                          f"must be a whole number >= 1 (not {bad[0]!r}), e.g. [64]")


def _check_mlp_layers(path: KeyPath, kind: str, settings: EncoderParams) -> None:
    if kind == "mlp" and not settings.hidden_sizes:
        raise ValueError(f"{_config_key(path)}.type='mlp' with hidden_sizes=[]: an MLP needs at least one layer; "
                         f"name one (e.g. [64]) or set type='flatten'")


# ---- every key ------------------------------------------------------------------------------------------------


class MultiInputEncoder(nn.Module):
    """The features of a Dict or Tuple observation: each leaf key's encoder (``plan_encoders``), their outputs
    concatenated in the space's key order (depth first), ``[*lead, out_dim]`` float features for leaves
    ``[*lead, ...]``. The top-level ``action_mask`` is not read (module docstring).

    ``forward`` takes a ``ttorch.Tensor`` tree or nested mappings of tensors (the latter also under
    ``torch.compile``). Under bf16 autocast the convolutions' and linear layers' features are bf16 and the others
    fp32; the concatenation is then fp32, which the heads' layers (autocast again) take as they are.

    Args:
        observation_space: a ``gymnasium.spaces.Dict`` or ``Tuple``.
        encoders: ``policy.model.encoders``: nested mappings from keys to ``EncoderParams`` settings.
        activation: the activation of the per-key MLPs.
        linear: builds their layers (``NoisyLinear`` for noisy networks; embeddings and convolutions stay).

    Examples:
        >>> space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
        ...                          "direction": gym.spaces.Discrete(4)})
        >>> enc = MultiInputEncoder(space, {"image": {"hidden_sizes": [32]}})
        >>> batch = ttorch.Tensor({"image": torch.zeros(5, 7, 7, 3, dtype=torch.uint8),
        ...                        "direction": torch.tensor([0, 1, 2, 3, 0])})
        >>> enc(batch).shape, enc.out_dim
        (torch.Size([5, 48]), 48)
        >>> print(enc.summary())
        observation['direction']: embedding Discrete(4) -> 16
        observation['image']: cnn Box(0, 255, (7, 7, 3), uint8), channels-last, scaled -> 32
    """

    def __init__(self, observation_space: gym.Space, encoders: Optional[Mapping[str, Any]] = None,
                 activation: type = nn.ReLU, linear: Linear = nn.Linear) -> None:
        super().__init__()
        self.plans = plan_encoders(observation_space, encoders)
        self.paths: List[KeyPath] = [plan.path for plan in self.plans]
        # a list, not a ModuleDict: a key of a space may hold a '.', which a module name may not
        self.leaves = nn.ModuleList(leaf_encoder(plan, activation, linear) for plan in self.plans)
        self.out_dims: List[int] = [leaf.out_dim for leaf in self.leaves]
        self.out_dim = int(sum(self.out_dims))

    def forward(self, obs: Any) -> torch.Tensor:
        inputs = _tree_leaves(obs, self.paths) if isinstance(obs, ttorch.Tensor) else \
            [_leaf(obs, path) for path in self.paths]
        return torch.cat([leaf(x) for x, leaf in zip(inputs, self.leaves)], dim=-1)

    def summary(self) -> str:
        """One line per key: its path, the encoder chosen and its output size (what "auto" decided)."""
        lines = []
        for plan, out in zip(self.plans, self.out_dims):
            notes = (", channels-last" if plan.channels_last else "") + (", scaled" if plan.scaled else "")
            lines.append(f"{key_label(plan.path)}: {plan.kind} {plan.space}{notes} -> {out}")
        return "\n".join(lines)


def build_torso(observation_space: gym.Space, encoders: Optional[Mapping[str, Any]], hidden_sizes: Sequence[int],
                activation: type = nn.ReLU, linear: Linear = nn.Linear) -> Tuple[nn.Module, int]:
    """A model's torso for ``observation_space`` and its output size, as ``policies.models.encoder`` returns
    them: a Dict or Tuple gets a ``MultiInputEncoder`` (``encoders``: ``policy.model.encoders``) followed by an
    MLP of ``hidden_sizes`` (none when empty); a Box gets ``policies.models.encoder(space.shape, ...)`` itself,
    so a model may call this for every space (``encoders`` unused there).

    Raises:
        ValueError: a space neither flat, an image nor a Dict/Tuple, or a bad key or setting (``plan_encoders``).

    Examples:
        >>> space = gym.spaces.Tuple((gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)))
        >>> torso, size = build_torso(space, None, [64, 64])
        >>> torso({"0": torch.zeros(4, 3), "1": torch.zeros(4, dtype=torch.long)}).shape, size
        (torch.Size([4, 64]), 64)
    """
    if isinstance(observation_space, gym.spaces.Box):
        return encoder(observation_space.shape, hidden_sizes, activation, linear)
    if not is_structured(observation_space):
        raise ValueError(f"the observation space {observation_space} is neither a Box nor a Dict or Tuple; wrap it "
                         f"in a gymnasium.spaces.Dict (a gymnasium.ObservationWrapper) or encode it to a Box")
    multi = MultiInputEncoder(observation_space, encoders, activation, linear)
    if not hidden_sizes:
        return multi, multi.out_dim
    return nn.Sequential(multi, mlp(multi.out_dim, hidden_sizes, activation, linear)), int(hidden_sizes[-1])
