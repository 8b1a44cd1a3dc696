"""A dataset's flat copy: its episodes' fields concatenated into ``.npy`` files beside the HDF5 file, memory-mapped
when read, so that ``OfflineDataset.transitions`` gathers rows without walking the HDF5 groups every time
(``data.offline.dataset``). Written atomically: a new directory renamed into place."""
from __future__ import annotations

import json
import os
import shutil
import uuid
from typing import Any, Dict, Iterable, List, Mapping, Optional

import numpy as np

from ..obs import cat_numpy, leaves, to_tensor
from .episode import Episode

__all__ = ["FLAT_DIR", "flat_stamp", "write_flat", "read_flat"]

#: the flat copy of a dataset, beside its ``data`` directory (hidden: Minari's listings skip it)
FLAT_DIR = ".baton_flat"
_FLAT_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations", "lengths")
#: a dictionary observation's flat copy: its leaves' key paths, in the order of ``observations.<i>.npy``
_LEAF_INDEX = "observations.json"


def flat_stamp(hdf5_file: str, total_steps: int) -> Dict[str, int]:
    st = os.stat(hdf5_file)
    return {"size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns), "total_steps": int(total_steps)}


def write_flat(flat_dir: str, episodes: Iterable[Episode], stamp: Mapping[str, int]) -> None:
    """Write the flat copy of ``episodes`` atomically (a new directory renamed into place): every field
    concatenated over episodes, ``observations`` with its ``T + 1`` rows per episode. A flat observation is
    ``observations.npy``; a dictionary one is a file per leaf, ``observations.<i>.npy``, and ``_LEAF_INDEX``, the
    leaves' key paths, from which ``read_flat`` nests them again."""
    episodes = list(episodes)
    observations = cat_numpy([e.observations for e in episodes])  # leaf by leaf for a dict (or tuple)
    arrays = {"actions": np.concatenate([e.actions for e in episodes]),
              "rewards": np.concatenate([e.rewards for e in episodes]).astype(np.float32),
              "terminations": np.concatenate([e.terminations for e in episodes]).astype(bool),
              "truncations": np.concatenate([e.truncations for e in episodes]).astype(bool),
              "lengths": np.array([len(e) for e in episodes], dtype=np.int64)}
    paths: Optional[List[List[str]]] = None
    if isinstance(observations, np.ndarray):
        arrays["observations"] = observations
    else:
        tree_leaves = leaves(to_tensor(observations))  # the tree's paths: a Tuple's items as "0", "1", ...
        paths = [list(path) for path, _ in tree_leaves]
        arrays.update({f"observations.{i}": leaf.numpy() for i, (_, leaf) in enumerate(tree_leaves)})
    parent, base = os.path.split(flat_dir)
    tmp = os.path.join(parent, f"{base}.tmp-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    try:
        for name, array in arrays.items():
            np.save(os.path.join(tmp, f"{name}.npy"), array)
        if paths is not None:
            with open(os.path.join(tmp, _LEAF_INDEX), "w") as f:
                json.dump({"paths": paths}, f)
        with open(os.path.join(tmp, "stamp.json"), "w") as f:
            json.dump(dict(stamp), f)
        old = None
        if os.path.exists(flat_dir):  # stale: move it aside first (another process may be reading it)
            old = f"{flat_dir}.old-{uuid.uuid4().hex[:8]}"
            os.replace(flat_dir, old)
        try:
            os.replace(tmp, flat_dir)
        except OSError:  # another rank renamed its fresh copy in first: use that one
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_flat(flat_dir: str) -> Dict[str, Any]:
    """The flat copy's arrays, memory-mapped: ``observations`` one array, or nested dicts of the leaves'."""
    load = lambda name: np.load(os.path.join(flat_dir, f"{name}.npy"), mmap_mode="r")  # noqa: E731
    flat = {name: load(name) for name in _FLAT_FIELDS if name != "observations"}
    index = os.path.join(flat_dir, _LEAF_INDEX)
    if not os.path.isfile(index):
        flat["observations"] = load("observations")
        return flat
    with open(index) as f:
        paths = json.load(f)["paths"]
    nested: Dict[str, Any] = {}
    for i, path in enumerate(paths):
        node = nested
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = load(f"observations.{i}")
    flat["observations"] = nested
    return flat
