"""bench/seed_table.py: seeds of several tasks run side by side as processes, a deadline stops what is still
going as a preemption does (scored by its last evaluation), and one ``baton report`` table comes out, naming
what was stopped, what failed and what has no score.

The test runs stand-in runs (a script that writes an evaluation and then finishes, runs until SIGTERM, crashes,
or writes nothing), so that what the table says does not hang on the machine's load; how ``baton train`` itself
stops on SIGTERM (a checkpoint, exit 143) is the preemption tests' (tests/pipelines)."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("bench_seed_table", os.path.join(ROOT, "bench", "seed_table.py"))
seed_table = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(seed_table)
Task = seed_table.Task

STAND_IN = textwrap.dedent("""
    import os, signal, sys, time
    run_dir, kind, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "crash":
        sys.exit(3)
    if kind != "silent":  # progress.csv as a run writes it: a header, then a row per record
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, "progress.csv"), "w") as f:
            f.write(f"env_step,eval/episode_return_mean\\n100,{10.0 * (seed + 1)}\\n")
    if kind == "endless":
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
        while True:
            time.sleep(0.05)
""")


def test_the_table_scores_finished_and_stopped_runs_and_names_the_rest(tmp_path, monkeypatch):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    monkeypatch.setattr(seed_table, "command", lambda job: [sys.executable, str(script), job.run_dir,
                                                            job.task.config, str(job.seed)])
    monkeypatch.setitem(seed_table.PLANS, "test", (
        Task("quick", "quick", 0, 3), Task("endless", "endless", 0, 1), Task("crash", "crash", 0, 1),
        Task("silent", "silent", 0, 1)))
    code = seed_table.main(["--plan", "test", "--root", str(tmp_path / "t"), "--jobs", "6", "--deadline-s", "8"])
    assert code == 1  # a run failed
    rows = {row["label"]: row for row in json.load(open(tmp_path / "t" / "table.json"))}
    assert set(rows) == {"quick", "endless"}
    assert rows["quick"]["seeds"] == 3 and rows["quick"]["iqm"] == 20.0 and rows["quick"]["stopped_at_deadline"] == 0
    assert rows["endless"]["seeds"] == 1 and rows["endless"]["stopped_at_deadline"] == 1
    text = open(tmp_path / "t" / "table.txt").read()
    assert "crash seed 0: failed (exit 3)" in text and "silent seed 0: no evaluation before it ended (exit 0)" in text
