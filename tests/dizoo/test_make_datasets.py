"""make_datasets.py leaves the datasets and nothing else: the teachers train in a temporary directory unless
``--work DIR`` keeps them (issue 23, item 6)."""
from __future__ import annotations

import json
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


def test_a_kept_teacher_is_reused_only_for_its_seed_and_once_it_reached_its_stop_value(tmp_path, monkeypatch):
    """``--work`` keeps one teacher per seed, and a teacher whose run stopped short of its stop value (killed,
    out of budget) is trained again rather than recorded with."""
    trained = []

    def serial_pipeline(cfg_create, seed, max_env_step, exp_name, force):
        trained.append((seed, exp_name))
        os.makedirs(os.path.join(exp_name, "ckpt"), exist_ok=True)
        open(os.path.join(exp_name, "ckpt", "best.pth.tar"), "w").close()
        reason = "max_env_step" if len(trained) == 1 else "stop_value"  # the first run falls short
        with open(os.path.join(exp_name, "summary.json"), "w") as f:
            json.dump({"stop_reason": reason}, f)
        return {"best_eval_return": 0.0, "env_step": 1, "train_iter": 1, "stop_reason": reason}

    import pipelines
    monkeypatch.setattr(pipelines, "serial_pipeline", serial_pipeline)
    work = str(tmp_path)
    ckpt = make_datasets.train_teacher("cartpole_ppo", work, seed=0)
    assert ckpt.startswith(os.path.join(work, "cartpole_teacher_seed0")) and len(trained) == 1
    make_datasets.train_teacher("cartpole_ppo", work, seed=0)  # stopped short: trained again
    assert len(trained) == 2
    make_datasets.train_teacher("cartpole_ppo", work, seed=0)  # reached its stop value: reused
    assert len(trained) == 2
    make_datasets.train_teacher("cartpole_ppo", work, seed=1)  # another seed: its own teacher
    assert trained[-1] == (1, os.path.join(work, "cartpole_teacher_seed1"))
