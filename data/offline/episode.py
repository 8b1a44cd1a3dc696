"""An episode in Minari's layout, and the errors of a dataset that cannot be used (``data.offline.dataset``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..obs import leaves, num_rows, to_tensor

__all__ = ["Episode", "Observations", "DatasetError", "DatasetNotFoundError", "DatasetSpaceError", "observation_label"]


class DatasetError(ValueError):
    """A dataset that cannot be used: corrupt, truncated, empty, or not a Minari dataset; names the path."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """No dataset of that name in the dataset root; the message says where it looked and how to make one."""


class DatasetSpaceError(DatasetError):
    """The dataset's observation or action space differs from the env's."""


#: observations as an episode holds them: one array, or nested dicts (``Dict`` spaces) and tuples (``Tuple``
#: spaces) of arrays, each leaf with one row per step plus the final observation
Observations = Union[np.ndarray, Mapping[str, Any], Tuple[Any, ...]]


@dataclass
class Episode:
    """One episode in Minari's layout: ``observations`` (an array, or nested dicts and tuples of arrays for a
    dictionary observation) has one row more than the other fields, in every leaf."""

    observations: Observations
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    id: Optional[int] = None

    def __len__(self) -> int:
        return len(self.rewards)

    def check(self) -> None:
        """Raise DatasetError when the fields' lengths do not fit Minari's layout (every observation leaf counted,
        the first that does not fit named)."""
        n = len(self.rewards)
        lengths = {"actions": len(self.actions), "terminations": len(self.terminations),
                   "truncations": len(self.truncations)}
        rows = _observation_rows(self.observations)
        wrong = next(((path, r) for path, r in rows if r != n + 1), None)
        if n == 0 or wrong is not None or any(v != n for v in lengths.values()):
            got = (f"{rows[0][1]} observations" if wrong is None or not wrong[0]
                   else f"{wrong[1]} rows in {observation_label(wrong[0])}")
            raise DatasetError(f"episode {self.id}: {n} rewards need {n + 1} observations and {n} actions, "
                               f"terminations and truncations; got {got} and {lengths}")


def _observation_rows(observations: Observations) -> List[Tuple[Tuple[str, ...], int]]:
    """The rows of every observation leaf, by key path (``((), rows)`` for one array)."""
    if not isinstance(observations, (Mapping, tuple)):
        return [((), len(observations))]
    return [(path, num_rows(leaf)) for path, leaf in leaves(to_tensor(observations))]


def observation_label(path: Sequence[str]) -> str:
    """``observation['outer']['inner']``: a key path as the errors name it (a Tuple's items are "0", "1", ...)."""
    return "observation" + "".join(f"[{key!r}]" for key in path)
