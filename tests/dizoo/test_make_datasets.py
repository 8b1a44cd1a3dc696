"""make_datasets.py leaves the datasets and nothing else: the teachers train in a temporary directory unless
``--work DIR`` keeps them (issue 23, item 6)."""
from __future__ import annotations

import os

from dizoo.classic_control import make_datasets


def test_the_teachers_train_in_a_temporary_directory_unless_kept(tmp_path, monkeypatch):
    seen = []

    def make(root, work, seed, only=None, overwrite=False):
        os.makedirs(os.path.join(work, "cartpole_teacher", "ckpt"))  # what a teacher's run writes
        seen.append(work)

    monkeypatch.setattr(make_datasets, "make", make)
    monkeypatch.chdir(tmp_path)
    make_datasets.main(["--root", str(tmp_path / "datasets")])
    assert os.listdir(tmp_path) == [] and not os.path.exists(seen[-1])
    make_datasets.main(["--root", str(tmp_path / "datasets"), "--work", "teachers"])
    assert seen[-1] == "teachers" and os.listdir(tmp_path) == ["teachers"]
