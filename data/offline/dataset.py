"""Minari datasets (Farama's format, the successor of D4RL) in a local dataset root.

A dataset ``namespace/name-v0`` lives in ``<root>/namespace/name-v0/data/``: ``metadata.json`` (the
observation and action spaces, the env spec, episode and step counts) and ``main_data.hdf5``, one group
per episode, ``episode_<i>``, holding

- ``observations``: ``T + 1`` rows (the last is the observation the final step led to),
- ``actions``, ``rewards``, ``terminations``, ``truncations``: ``T`` rows each.

A dictionary observation (a gymnasium ``Dict`` or ``Tuple`` space, nested too) is stored in Minari's layout, a
group per key, each leaf with its ``T + 1`` rows; read back, ``Episode.observations`` holds nested dicts (tuples
for a ``Tuple``) of arrays, and ``transitions()`` gives ``obs``/``next_obs`` as a DI-treetensor tree (``data.obs``,
a ``Tuple``'s items under keys ``"0"``, ``"1"``, ...), each leaf in its own dtype: an image stays uint8.

``terminations`` and ``truncations`` are stored apart, and stay apart when read: a truncated transition
bootstraps from its next observation, only a terminated one cuts the return. The root is ``root`` when
given, else ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets`` (Minari's own rule), so
``minari.load_dataset(name)`` reads what ``write_dataset`` wrote. Nothing is ever downloaded.

Examples:
    >>> import tempfile, gymnasium as gym, numpy as np
    >>> root = tempfile.mkdtemp()
    >>> ep = Episode(observations=np.zeros((4, 2), np.float32), actions=np.array([0, 1, 0]),
    ...              rewards=np.ones(3, np.float32), terminations=np.array([False, False, True]),
    ...              truncations=np.zeros(3, bool))
    >>> spaces = gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2)
    >>> _ = write_dataset("toy/tiny-v0", [ep, ep], *spaces, root=root)
    >>> ds = open_dataset("toy/tiny-v0", root=root)
    >>> ds.n_episodes, ds.total_steps, ds.transitions()["terminated"].tolist()
    (2, 6, [False, False, True, False, False, True])
    >>> camera = gym.spaces.Dict(image=gym.spaces.Box(0, 255, (3, 3, 1), np.uint8), cell=gym.spaces.Discrete(9))
    >>> ep.observations = {"image": np.zeros((4, 3, 3, 1), np.uint8), "cell": np.arange(4)}
    >>> _ = write_dataset("toy/camera-v0", [ep], camera, spaces[1], root=root)
    >>> obs = open_dataset("toy/camera-v0", root=root).transitions()["obs"]
    >>> obs["image"].dtype, obs["image"].shape, obs["cell"].tolist()
    (torch.uint8, torch.Size([3, 3, 3, 1]), [0, 1, 2])
"""
from __future__ import annotations

import difflib
import inspect
import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch

from engine.params import Params, param
from engine.registry import CONFIG_SECTIONS, MissingExtraError

from ..obs import Obs, map_leaves, space_leaves, to_tensor
from .episode import DatasetError, DatasetNotFoundError, DatasetSpaceError, Episode
from .flat_copy import FLAT_DIR, flat_stamp, read_flat, write_flat
from .shard import SPLITS
from .spaces import as_arrays, as_space, check_storable, leaf_rows, space_difference

logger = logging.getLogger(__name__)

__all__ = ["DatasetParams", "Episode", "OfflineDataset", "open_dataset", "write_dataset", "dataset_root", "DatasetError",
           "DatasetNotFoundError", "DatasetSpaceError", "MAKE_HINT", "check_storable"]

#: how to make a dataset, named in every "not found" error
MAKE_HINT = ("record one from a trained checkpoint: baton record -c CONFIG --ckpt RUN/ckpt/best.pth.tar "
             "--episodes N --dataset NAME (or build the reference datasets: python "
             "dizoo/classic_control/make_datasets.py)")


@dataclass
class DatasetParams(Params):
    """The config's ``dataset`` section: the dataset offline policies train from (docs/offline.md); online
    policies ignore it."""

    name: str = param("")
    """A Minari dataset id, e.g. "cartpole/expert-v0"."""
    root: str = param("")
    """The dataset root; "": ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets`` (``dataset_root``)."""
    split: str = param("shard", choices=SPLITS)
    """Under DDP: "shard" (each rank its own episodes) or "replicate" (all, each rank in its own order)."""


CONFIG_SECTIONS.register("dataset", DatasetParams)


def dataset_root(root: Optional[str] = None) -> str:
    """The dataset root: ``root``, else ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    if root:
        return os.path.abspath(os.path.expanduser(root))
    env = os.environ.get("MINARI_DATASETS_PATH")
    return os.path.abspath(env) if env else os.path.join(os.path.expanduser("~"), ".minari", "datasets")


def _minari() -> Any:
    try:
        import minari  # noqa: F401
        from minari.dataset.minari_storage import MinariStorage
    except ImportError as err:
        raise MissingExtraError.of_import("offline datasets need Minari: pip install -c constraints.txt -e "
                                          "\".[offline]\"", err) from err
    return MinariStorage


def _data_path(name: str, root: Optional[str]) -> str:
    if not name or name.startswith("/") or ".." in name.split("/"):
        raise DatasetError(f"dataset name {name!r}: use a Minari id such as 'cartpole/expert-v0'")
    return os.path.join(dataset_root(root), name, "data")


def _local_names(root: str) -> List[str]:
    names = []
    for dirpath, dirnames, _ in os.walk(root):
        if os.path.isfile(os.path.join(dirpath, "data", "metadata.json")):
            names.append(os.path.relpath(dirpath, root).replace(os.sep, "/"))
            dirnames[:] = []
    return sorted(names)


class OfflineDataset:
    """A Minari dataset opened for reading (``open_dataset``).

    Attributes:
        name: the dataset id; ``path``: its ``data`` directory.
        observation_space, action_space: the spaces it was recorded with.
        episode_lengths: steps per episode, in episode order.
        metadata: Minari's ``metadata.json``, spaces deserialized.
    """

    def __init__(self, name: str, path: str, storage: Any) -> None:
        self.name = name
        self.path = path
        self._storage = storage
        self.metadata: Dict[str, Any] = storage.metadata
        self.observation_space: gym.Space = storage.observation_space
        self.action_space: gym.Space = storage.action_space
        self.n_episodes = int(self.metadata.get("total_episodes", 0))
        if self.n_episodes <= 0:
            raise DatasetError(f"dataset {name!r} at {path} holds no episodes")
        if not os.path.isfile(self._file()):
            raise DatasetError(f"dataset {name!r} at {path}: {self._file()} is missing; record it again "
                               f"({MAKE_HINT})")
        self.episode_lengths = np.array(self._flat()["lengths"])
        if len(self.episode_lengths) != self.n_episodes:
            raise DatasetError(f"dataset {name!r} at {path}: metadata.json counts {self.n_episodes} episodes, "
                               f"{self._file()} holds {len(self.episode_lengths)}; record it again")

    @property
    def total_steps(self) -> int:
        return int(self.episode_lengths.sum())

    def _file(self) -> str:
        return os.path.join(self.path, "main_data.hdf5")

    def episodes(self, indices: Optional[Iterable[int]] = None) -> Iterator[Episode]:
        """The episodes ``indices`` (default: all), in that order, as numpy arrays.

        Raises:
            DatasetError: naming the file and the episode when the file is corrupt or truncated.
        """
        indices = list(range(self.n_episodes) if indices is None else indices)
        current = None
        try:
            for raw in self._storage.get_episodes(indices):
                current = raw["id"]
                ep = Episode(as_arrays(raw["observations"]), np.asarray(raw["actions"]),
                             np.asarray(raw["rewards"]), np.asarray(raw["terminations"], dtype=bool),
                             np.asarray(raw["truncations"], dtype=bool), id=int(raw["id"]))
                ep.check()
                yield ep
        except (OSError, KeyError, TypeError, ValueError, AssertionError) as err:
            if isinstance(err, DatasetError):
                raise
            where = f"after episode {current}" if current is not None else "at its first episode"
            raise DatasetError(f"dataset {self.name!r}: {self._file()} is corrupt or truncated ({where}: {err}); "
                               f"record it again ({MAKE_HINT})") from err

    def transitions(self, indices: Optional[Sequence[int]] = None) -> Dict[str, Obs]:
        """The one-step transitions of episodes ``indices`` (default: all), concatenated in that order:
        ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``, ``truncated`` as tensors
        (observations and rewards float32; discrete actions int64, continuous float32). A dictionary observation
        is a tree (``data.obs``) whose leaves keep their dtype (an image stays uint8, a quarter of float32's
        memory), except float leaves, float32, and ``Discrete``/``MultiDiscrete`` ones, int64.

        Read from the flat copy (``FLAT_DIR``, built from the HDF5 file on first use): one array per
        field (per observation leaf), so a shard is a handful of index gathers rather than one HDF5 lookup per
        episode."""
        flat = self._flat()
        lengths = flat["lengths"]
        sel = np.arange(self.n_episodes) if indices is None else np.asarray(indices, dtype=np.int64)
        if len(sel) == 0:
            raise DatasetError(f"dataset {self.name!r}: no episodes selected")
        if sel.min() < 0 or sel.max() >= self.n_episodes:
            raise DatasetError(f"dataset {self.name!r} has episodes 0..{self.n_episodes - 1}, asked for "
                               f"{sel.min()}..{sel.max()}")
        starts = np.cumsum(lengths) - lengths          # first transition row of each episode
        sel_len = lengths[sel]
        total = int(sel_len.sum())
        out_starts = np.cumsum(sel_len) - sel_len
        t_idx = np.arange(total) + np.repeat(starts[sel] - out_starts, sel_len)
        o_idx = t_idx + np.repeat(sel, sel_len)        # each earlier episode holds one more observation row
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        action = np.asarray(flat["actions"][t_idx]).astype(np.int64 if discrete else np.float32, copy=False)
        return {"obs": self._observations(flat["observations"], o_idx),
                "action": torch.from_numpy(action),
                "reward": torch.from_numpy(np.asarray(flat["rewards"][t_idx], dtype=np.float32)),
                "next_obs": self._observations(flat["observations"], o_idx + 1),
                "terminated": torch.from_numpy(np.asarray(flat["terminations"][t_idx], dtype=bool)),
                "truncated": torch.from_numpy(np.asarray(flat["truncations"][t_idx], dtype=bool))}

    def _observations(self, observations: Any, rows: np.ndarray) -> Obs:
        """The observation rows ``rows`` of the flat copy: a float32 tensor, or a tree of every leaf's rows in
        its dtype (``transitions``)."""
        if isinstance(observations, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(observations[rows], dtype=np.float32))
        spaces = dict(space_leaves(self.observation_space))
        return to_tensor(map_leaves(lambda leaf, path: leaf_rows(leaf, rows, spaces.get(path)), observations,
                                    with_path=True))

    def _flat(self) -> Dict[str, Any]:
        """The flat copy's arrays (memory-mapped), built first when missing or older than the HDF5 file;
        ``observations`` is one array, or nested dicts of the leaves' arrays (``write_flat``)."""
        flat_dir = os.path.join(os.path.dirname(self.path), FLAT_DIR)
        stamp = flat_stamp(self._file(), int(self.metadata.get("total_steps", -1)))
        try:
            with open(os.path.join(flat_dir, "stamp.json")) as f:
                fresh = json.load(f) == stamp
        except (OSError, ValueError):
            fresh = False
        if not fresh:
            write_flat(flat_dir, self.episodes(), stamp)
        try:
            return read_flat(flat_dir)
        except (OSError, ValueError, KeyError, IndexError) as err:
            raise DatasetError(f"dataset {self.name!r}: the flat copy {flat_dir} is unreadable ({err}); delete "
                               f"it and it is rebuilt from {self._file()}") from err

    def episode_returns(self) -> np.ndarray:
        """The undiscounted return of every episode (reads the rewards only)."""
        import h5py

        with h5py.File(self._file(), "r") as f:
            return np.array([float(np.sum(f[f"episode_{i}"]["rewards"][()])) for i in range(self.n_episodes)])

    def check_spaces(self, observation_space: gym.Space, action_space: gym.Space, env_desc: str) -> None:
        """Raise DatasetSpaceError when the env's spaces differ from the dataset's.

        Box spaces must agree in shape (bounds and dtype may differ: a dataset recorded on a wrapped env
        can declare other bounds); Discrete spaces in their number of actions; Dict and Tuple spaces in their
        keys, and key by key by these rules (the error names the first key path that differs)."""
        for what, ours, theirs in (("observation", self.observation_space, observation_space),
                                   ("action", self.action_space, action_space)):
            difference = space_difference(ours, theirs)
            if difference is not None:
                where = f" ({difference})" if difference else ""
                raise DatasetSpaceError(f"dataset {self.name!r} ({self.path}) was recorded with {what} space "
                                        f"{ours}, but {env_desc} has {theirs}{where}: train on the env the dataset "
                                        f"was recorded on, or record a dataset on this env")


def _episodes_of(buffers: Sequence[Any]) -> List[Episode]:
    return [Episode(b.observations, b.actions, b.rewards, b.terminations, b.truncations, id=b.id) for b in buffers]


def open_dataset(name: str, root: Optional[str] = None) -> OfflineDataset:
    """Open dataset ``name`` from the dataset root (``dataset_root(root)``).

    Raises:
        DatasetNotFoundError: naming the directory it looked in, the datasets that root holds and how to
            make one.
        DatasetError: a corrupt or truncated file, a dataset without episodes.
    """
    storage_cls = _minari()
    path = _data_path(name, root)
    meta_file = os.path.join(path, "metadata.json")
    if not os.path.isfile(meta_file):
        where = dataset_root(root)
        have = _local_names(where) if os.path.isdir(where) else []
        close = difflib.get_close_matches(name, have, n=1, cutoff=0.6)
        raise DatasetNotFoundError(
            f"dataset {name!r} not found{f' (did you mean {close[0]!r}?)' if close else ''}: looked for {meta_file} "
            f"(dataset root {where}, from "
            f"{'dataset.root' if root else '$MINARI_DATASETS_PATH' if os.environ.get('MINARI_DATASETS_PATH') else 'the default ~/.minari/datasets'}"
            f"). That root holds {', '.join(have) if have else 'no datasets'}. To make it, {MAKE_HINT}")
    try:
        storage = storage_cls.read(path)
    except (ValueError, OSError, KeyError, json.JSONDecodeError, AssertionError) as err:
        raise DatasetError(f"dataset {name!r} at {path} is not a readable Minari dataset ({err!r}); record it "
                           f"again ({MAKE_HINT})") from err
    return OfflineDataset(name, path, storage)


def write_dataset(name: str, episodes: Iterable[Episode], observation_space: gym.Space, action_space: gym.Space,
                  root: Optional[str] = None, env_id: Optional[str] = None,
                  metadata: Optional[Mapping[str, Any]] = None, overwrite: bool = False) -> str:
    """Write ``episodes`` as Minari dataset ``name`` under the dataset root; returns its ``data`` path.

    The dataset is written beside its final place and renamed into it when complete, so an interrupted
    write leaves no half dataset under the name.

    Args:
        env_id: the gymnasium id it was recorded on (its spec is stored, as Minari does, where it can be: a spec
            whose entry point is a class rather than a ``"module:Class"`` string is not, and the id is kept in
            ``metadata.json``'s ``env_id`` instead).
        metadata: further plain entries for ``metadata.json`` (``algorithm_name``, ``description``, ...).
        overwrite: replace an existing dataset of that name (default: an error).

    A dictionary observation (a ``Dict`` or ``Tuple`` space) is written in Minari's layout, a group per key,
    images raw (Minari's lossy JPEG encoding of images is switched off where it has one): each episode's
    ``observations`` nested as the space is (a ``Tuple``'s items as a tuple, or as a mapping keyed "0", "1", ...).

    Raises:
        DatasetError: the name exists (without ``overwrite``), an episode does not fit the layout or its
            observations do not fit the space, or the space has a leaf no dataset stores (``check_storable``).
    """
    storage_cls = _minari()
    check_storable(observation_space, f"dataset {name!r}")
    from minari import __version__ as minari_version
    from minari.data_collector import EpisodeBuffer

    data_path = _data_path(name, root)
    final_dir = os.path.dirname(data_path)
    if os.path.exists(final_dir) and not overwrite:
        raise DatasetError(f"dataset {name!r} exists already at {final_dir}: pick another name or version "
                           f"(e.g. -v1), or pass overwrite")
    parent, base = os.path.split(final_dir)
    tmp_dir = os.path.join(parent, f".{base}.tmp-{uuid.uuid4().hex[:8]}")  # hidden: Minari lists no half dataset
    tmp_data = os.path.join(tmp_dir, "data")
    os.makedirs(tmp_data)
    try:
        env_spec = _json_spec(env_id)
        storage = storage_cls.new(tmp_data, observation_space=observation_space, action_space=action_space,
                                  env_spec=env_spec, data_format="hdf5", **_lossless(storage_cls))
        meta = {"dataset_id": name, "minari_version": minari_version, "author": {"baton"}}
        if env_id and env_spec is None:
            meta["env_id"] = env_id
        meta.update(dict(metadata or {}))
        storage.update_metadata(meta)
        buffers = []
        for i, ep in enumerate(episodes):
            ep.id = i
            ep.check()
            try:
                observations = as_space(ep.observations, observation_space)
            except DatasetError as err:
                raise DatasetError(f"dataset {name!r}, episode {i}: {err}") from None
            buffers.append(EpisodeBuffer(id=i, observations=observations,
                                         actions=np.asarray(ep.actions), rewards=np.asarray(ep.rewards),
                                         terminations=np.asarray(ep.terminations, dtype=bool),
                                         truncations=np.asarray(ep.truncations, dtype=bool)))
        if not buffers:
            raise DatasetError(f"dataset {name!r}: no episodes to write")
        storage.update_episodes(buffers)
        total = sum(len(b.rewards) for b in buffers)
        write_flat(os.path.join(tmp_dir, FLAT_DIR), _episodes_of(buffers),
                    flat_stamp(os.path.join(tmp_data, "main_data.hdf5"), total))
        if os.path.exists(final_dir):
            shutil.rmtree(final_dir)
        os.replace(tmp_dir, final_dir)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return data_path


def _json_spec(env_id: Optional[str]) -> Optional[Any]:
    """The gymnasium spec of ``env_id`` where Minari can store it (JSON: an entry point given as a class, as
    ``gym.register(id, entry_point=EnvClass)`` allows, is not), else None."""
    if not env_id:
        return None
    spec = gym.spec(env_id)
    try:
        spec.to_json()
    except ValueError:
        logger.info("the spec of %s is not stored with the dataset (its entry point %r is not a 'module:Class' "
                    "string, which JSON cannot hold); metadata.json names its id", env_id, spec.entry_point)
        return None
    return spec


def _lossless(storage_cls: Any) -> Dict[str, Any]:
    """``jpeg_encoding=False`` where this Minari's storage takes it: it would JPEG-encode image leaves (lossy), and
    a dataset holds the observations the policy saw."""
    return {"jpeg_encoding": False} if "jpeg_encoding" in inspect.signature(storage_cls.new).parameters else {}
