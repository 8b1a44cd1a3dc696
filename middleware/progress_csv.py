"""``<exp_name>/progress.csv``: the logged scalars of a run as one CSV row per logging event.

Columns: ``env_step``, ``train_iter``, ``wall_time_s``, then, as the logger writes them, ``elapsed_s`` (the
run's two clocks, ``middleware.summary``) and the TensorBoard tags (``eval/episode_return_mean``,
``train/loss``, ...) in the order they were first logged. A row leaves empty the tags not logged at that
step (an interval row has no evaluation, an evaluation row may have no speed). A tag first seen after rows
were written widens the header: the file is rewritten (atomically) with the new column, earlier rows empty
in it, so no value is ever dropped. Each row is flushed as it is written, so a killed run keeps every row
it logged.

Readers: ``read_progress`` (used by ``baton plot``), or any CSV reader (``pandas.read_csv``).
"""
from __future__ import annotations

import csv
import io
import math
import os
from typing import IO, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from engine.fileio import atomic_write

__all__ = ["ProgressCSV", "read_progress", "PROGRESS_FILE", "LEADING_COLUMNS"]

PROGRESS_FILE = "progress.csv"
LEADING_COLUMNS = ("env_step", "train_iter", "wall_time_s")

Value = Union[int, float]


class ProgressCSV:
    """Append rows of scalars to a CSV file whose header grows with the tags it is given.

    Args:
        path: the file; its directory is created on the first write.
        resume_env_step: None for a new run: an existing file is replaced on the first write. For a run
            resumed from a checkpoint at this env step: the existing rows up to it are kept (later ones came
            from the part of the killed run that the checkpoint does not hold) and new rows go after them.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "progress.csv")
        >>> out = ProgressCSV(path)
        >>> out.write({"env_step": 64, "train_iter": 8, "wall_time_s": 0.5, "train/loss": 0.25})
        >>> out.write({"env_step": 128, "train_iter": 16, "wall_time_s": 1.0, "eval/episode_return_mean": 9.5})
        >>> out.close()
        >>> print(open(path).read().replace("\\r", ""), end="")
        env_step,train_iter,wall_time_s,train/loss,eval/episode_return_mean
        64,8,0.5,0.25,
        128,16,1.0,,9.5
    """

    def __init__(self, path: str, resume_env_step: Optional[int] = None) -> None:
        self.path = path
        self._resume_env_step = resume_env_step
        self._fields: List[str] = list(LEADING_COLUMNS)
        self._file: Optional[IO[str]] = None
        self._writer: Optional[csv.DictWriter] = None
        # the rows this run continues, written back on the first write (not before: a run may never log)
        self._kept: Optional[List[Dict[str, str]]] = self._kept_rows()
        # a resumed run's wall clock goes on from where the kept rows end
        self.resumed_wall_time_s = float(self._kept[-1]["wall_time_s"] or 0.0) if self._kept else 0.0

    @property
    def fields(self) -> List[str]:
        """The columns, in file order."""
        return list(self._fields)

    def write(self, row: Mapping[str, Value]) -> None:
        """Append ``row`` (column -> number) and flush; a column not seen before widens the header."""
        new = [key for key in row if key not in self._fields]
        if self._kept is not None:  # the first write: the file becomes the kept rows (none for a new run)
            self._fields.extend(new)
            self._rewrite(self._kept)
            self._kept = None
        elif new:
            self._widen(new)
        elif self._file is None:  # written again after close()
            self._open_for_append()
        assert self._writer is not None and self._file is not None
        self._writer.writerow({key: _cell(value) for key, value in row.items()})
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._writer = None

    # ---- file handling ----------------------------------------------------------------------------
    def _kept_rows(self) -> List[Dict[str, str]]:
        """Rows of an existing file that this run continues (none for a new run)."""
        if self._resume_env_step is None or not os.path.isfile(self.path):
            return []
        header, rows = _read_rows(self.path)
        for name in header:
            if name not in self._fields:
                self._fields.append(name)
        return [r for r in rows if r.get("env_step") and float(r["env_step"]) <= self._resume_env_step]

    def _widen(self, new: List[str]) -> None:
        """Rewrite the file with ``new`` columns appended to the header (rare: a tag's first appearance)."""
        self.close()
        _, rows = _read_rows(self.path)
        self._fields.extend(new)
        self._rewrite(rows)

    def _rewrite(self, rows: List[Dict[str, str]]) -> None:
        """Replace the file by the header and ``rows`` in one rename, then reopen it for appending."""
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=self._fields)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write(self.path, lambda f: f.write(text.getvalue().encode("utf-8")))
        self._open_for_append()

    def _open_for_append(self) -> None:
        self._file = open(self.path, "a", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._file, fieldnames=self._fields)


def _cell(value: Value) -> Value:
    """Plain Python numbers (numpy scalars would print as ``np.float64(...)`` on some versions)."""
    return value.item() if isinstance(value, np.generic) else value


def _read_rows(path: str) -> Tuple[List[str], List[Dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def read_progress(path: str) -> Dict[str, np.ndarray]:
    """The columns of a ``progress.csv`` as float arrays of equal length, NaN where a row left a cell empty.

    Raises:
        FileNotFoundError: naming the path.
        ValueError: when the file has no header.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {PROGRESS_FILE} at {path}")
    header, rows = _read_rows(path)
    if not header:
        raise ValueError(f"{path} is empty: a {PROGRESS_FILE} starts with a header line")
    return {name: np.array([_number(row.get(name)) for row in rows], dtype=np.float64) for name in header}


def _number(cell: Optional[str]) -> float:
    return float(cell) if cell not in (None, "") else math.nan
