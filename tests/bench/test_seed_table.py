"""bench/seed_table.py: seeds of several tasks run side by side as ``baton train`` processes, a deadline stops
what is still going as a preemption does (scored by its last evaluation), and one ``baton report`` table comes
out, naming the runs stopped and the runs without a score."""
from __future__ import annotations

import importlib.util
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("bench_seed_table", os.path.join(ROOT, "bench", "seed_table.py"))
seed_table = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(seed_table)
Task = seed_table.Task

CARTPOLE = "dizoo/classic_control/cartpole/config/cartpole_{}_config.py"


def test_a_table_of_seeds_with_a_deadline(tmp_path, monkeypatch):
    monkeypatch.setitem(seed_table.PLANS, "test", (
        Task("short", CARTPOLE.format("dqn"), 300, 2, ("env.stop_value=none", "policy.eval.evaluator.eval_freq=50",
                                                       "env.n_evaluator_episode=1")),
        Task("endless", CARTPOLE.format("ppo"), 10**8, 1, ("env.stop_value=none", "policy.eval.evaluator.eval_freq=1",
                                                           "env.n_evaluator_episode=1")),
    ))
    assert seed_table.main(["--plan", "test", "--root", str(tmp_path), "--jobs", "3", "--deadline-s", "20"]) == 0
    rows = {row["label"]: row for row in json.load(open(tmp_path / "table.json"))}
    # the short runs end on their own on an idle machine; on a loaded one the deadline may reach them too
    assert rows["short"]["seeds"] == 2 and rows["short"]["failed"] == 0
    assert rows["endless"]["seeds"] == 1 and rows["endless"]["stopped_at_deadline"] == 1
    text = open(tmp_path / "table.txt").read()
    assert "IQM (final)" in text and "endless: mean wall" in text and "1 of 1 stopped at the deadline" in text
    assert os.path.isdir(tmp_path / "endless_seed0" / "ckpt")  # stopped as a preemption: its checkpoint saved
