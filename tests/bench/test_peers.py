"""bench/peers.py without training: baton's progress.csv read into a curve, the time to a score, the
eval_freq that matches an env-step interval, the summary of seeds, the skip of a task baton cannot run, and --jobs's
runs at once."""
from __future__ import annotations

import ast
import importlib.util
import os

import pytest

from middleware.progress_csv import ProgressCSV

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(ROOT, "bench", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


peers = _load("peers")
peers_sb3 = _load("peers_sb3")
Evaluation = peers.Evaluation


def test_baton_curve_reads_evaluation_rows_in_env_step_order(tmp_path):
    path = str(tmp_path / "progress.csv")
    out = ProgressCSV(path)
    out.write({"env_step": 64, "train_iter": 8, "wall_time_s": 0.5, "train/loss": 0.25})  # an interval row
    out.write({"env_step": 128, "train_iter": 16, "wall_time_s": 1.0, "eval/episode_return_mean": 9.5})
    out.write({"env_step": 256, "train_iter": 32, "wall_time_s": 2.5, "eval/episode_return_mean": 30.0})
    # a background evaluation's row comes in after a later step's row, at the step of its weights
    out.write({"env_step": 192, "train_iter": 24, "wall_time_s": 1.5, "eval/episode_return_mean": 20.0})
    out.close()
    assert peers.baton_curve(path) == [Evaluation(128, 1.0, 9.5), Evaluation(192, 1.5, 20.0),
                                       Evaluation(256, 2.5, 30.0)]


def test_baton_curve_of_a_run_without_evaluations_is_empty(tmp_path):
    path = str(tmp_path / "progress.csv")
    out = ProgressCSV(path)
    out.write({"env_step": 64, "train_iter": 8, "wall_time_s": 0.5, "train/loss": 0.25})
    out.close()
    assert peers.baton_curve(path) == []


def test_time_to_score_is_the_first_evaluation_reaching_it():
    curve = [Evaluation(100, 1.0, 10.0), Evaluation(200, 2.0, 50.0), Evaluation(300, 3.0, 40.0),
             Evaluation(400, 4.0, 60.0)]
    assert peers.time_to_score(curve, 45.0) == 2.0
    assert peers.time_to_score(curve, 50.0) == 2.0  # reaching is >=
    assert peers.time_to_score(curve, 60.5) is None
    assert peers.time_to_score([], 0.0) is None


@pytest.mark.parametrize("on_policy, learn, n_sample, envs, eval_every, expected", [
    # off-policy: 64 env steps and 8 updates an iteration; 2000 env steps ~ 31 iterations
    (False, dict(update_per_collect=8), 64, 8, 2000, (248, 1984)),
    # n_sample rounded up to whole vector steps: 10 on 4 envs is 12 env steps an iteration
    (False, dict(update_per_collect=3), 10, 4, 120, (30, 120)),
    # on-policy: 10 epochs of 256 / 64 = 4 minibatches
    (True, dict(epoch_per_collect=10, batch_size=64), 256, 8, 1000, (160, 1024)),
    # an interval below one iteration evaluates every iteration
    (True, dict(epoch_per_collect=1, batch_size=100), 250, 5, 10, (3, 250)),
])
def test_eval_schedule_matches_env_steps_with_whole_iterations(on_policy, learn, n_sample, envs, eval_every, expected):
    cfg = dict(env=dict(collector_env_num=envs), policy=dict(collect=dict(n_sample=n_sample), learn=learn))
    assert peers.eval_schedule(cfg, on_policy, eval_every) == expected


def test_summarise_times_each_seed_to_the_peers_final():
    counts = dict(env_step=200, train_iter=50)
    runs = [dict(curve=[[100, 1.0, 10.0], [200, 2.0, 80.0]], wall_time_s=2.0, process_s=3.0, **counts),
            dict(curve=[[100, 1.5, 20.0], [200, 3.0, 40.0]], wall_time_s=4.0, process_s=5.0, **counts)]
    s = peers.summarise(runs, peer_final=70.0)
    assert s["finals"] == [80.0, 40.0] and s["final"] == 60.0
    assert s["bests"] == [80.0, 40.0]
    assert s["to_peer_final_each_s"] == [2.0, None]
    assert s["to_peer_final_s"] == 2.0 and s["seeds_reaching_peer_final"] == 1
    assert s["env_steps_per_s"] == pytest.approx((100 + 50) / 2)
    assert s["updates_per_s"] == pytest.approx((25 + 12.5) / 2)
    assert s["final_iqm"] == 60.0 and s["final_ci"][0] <= 60.0 <= s["final_ci"][1]  # baton report's estimate
    rows = " ".join(peers.format_rows({"baton": s, "sb3": peers.summarise(runs[1:], 80.0)}))
    assert "never" in rows and "baton  final return IQM 60.0, 95% bootstrap CI [40.0, 80.0] (2 seeds" in rows


def test_a_task_whose_algorithm_is_not_registered_is_skipped(tmp_path):
    task = peers.Task("CartPole-v1", "notanalgo", 1000, "dizoo/none/notanalgo_config.py")
    with pytest.raises(peers.TaskSkipped, match="notanalgo.*not a registered algorithm"):
        peers.resolve_baton(task, eval_every=100, root=str(tmp_path))


def test_a_task_with_a_dizoo_config_runs_the_config():
    setup = peers.resolve_baton(peers.TASKS["cartpole-dqn"], eval_every=2000)
    assert setup.source == peers.TASKS["cartpole-dqn"].config
    assert setup.argv[-1] == os.path.join(ROOT, setup.source)
    assert (setup.eval_freq, setup.eval_env_steps) == (496, 1984)  # the config: 64 env steps, 16 updates


def test_every_task_has_sb3_settings_and_bad_task_names_are_named(capsys):
    assert set(peers.TASKS) == set(peers_sb3.ZOO)
    with pytest.raises(SystemExit):
        peers.main(["--tasks", "cartpole-dqn,nosuchtask"])
    assert "unknown task nosuchtask; choose from cartpole-dqn" in capsys.readouterr().err


def test_run_in_order_starts_in_order_and_never_runs_more_than_jobs_at_once():
    import threading
    import time

    lock, running, most, started, done = threading.Lock(), [0], [0], [], []

    def call(i):
        def run():
            with lock:
                started.append(i)
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.02 * (3 - i % 3))  # later calls end first: on_done follows the ends, not the order
            with lock:
                running[0] -= 1
            return i * 10
        return run

    peers.run_in_order([call(i) for i in range(6)], 2, lambda i, result: done.append((i, result)))
    assert started[:2] == [0, 1] and sorted(started) == list(range(6)) and most[0] == 2
    assert sorted(done) == [(i, i * 10) for i in range(6)]


def test_run_in_order_raises_the_first_failure_and_starts_nothing_after_it():
    started = []

    def call(i):
        def run():
            started.append(i)
            if i == 0:
                raise RuntimeError("SB3 cartpole-dqn seed 0 failed (exit 1)")
            return i
        return run

    with pytest.raises(RuntimeError, match="seed 0 failed"):
        peers.run_in_order([call(i) for i in range(5)], 1, lambda i, result: None)
    assert started == [0]


def test_jobs_run_both_sides_and_write_each_task_in_seed_order(tmp_path, monkeypatch, capsys):
    def fake(framework):
        def run(name, *args, **kwargs):
            seed = args[1]
            final = 100.0 + seed if framework == "baton" else 50.0
            return dict(framework=framework, task=name, seed=seed, env_step=1000, train_iter=500, wall_time_s=2.0,
                        process_s=3.0, curve=[[500, 1.0, final / 2], [1000, 2.0, final]])
        return run

    monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))  # where the script's own directory puts it
    monkeypatch.setattr(peers, "run_sb3", fake("sb3"))
    monkeypatch.setattr(peers, "run_baton", fake("baton"))
    out = tmp_path / "peers.json"
    peers.main(["--tasks", "cartpole-dqn", "--seeds", "2,0,1", "--jobs", "2", "--json", str(out)])
    import json

    task = json.loads(out.read_text())["tasks"]["cartpole-dqn"]
    assert [r["seed"] for r in task["runs"]["baton"]] == [2, 0, 1]
    assert task["summary"]["baton"]["finals"] == [102.0, 100.0, 101.0]
    assert task["summary"]["sb3"]["final"] == 50.0
    assert "cartpole-dqn baton seed 1: final 101.0" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        peers.main(["--tasks", "cartpole-dqn", "--jobs", "0"])


def test_one_side_runs_alone_and_baton_set_reaches_baton_s_command(tmp_path, monkeypatch, capsys):
    """``--sides baton`` starts no SB3 run and its table says there is no peer; ``--baton-set`` follows the
    task's own overrides."""
    calls = []

    def fake_baton(name, setup, seed, budget, eval_episodes, workdir, overrides=()):
        calls.append(tuple(overrides))
        return dict(framework="baton", task=name, seed=seed, env_step=1000, train_iter=500, wall_time_s=2.0,
                    process_s=3.0, curve=[[1000, 2.0, 7.0]])

    def no_sb3(*args, **kwargs):
        raise AssertionError("--sides baton ran SB3")

    monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
    monkeypatch.setattr(peers, "run_sb3", no_sb3)
    monkeypatch.setattr(peers, "run_baton", fake_baton)
    out = tmp_path / "peers.json"
    peers.main(["--tasks", "halfcheetah-td3", "--seeds", "0,1", "--sides", "baton", "--baton-set", "policy.amp=bf16",
                "--json", str(out)])
    import json

    task = json.loads(out.read_text())["tasks"]["halfcheetah-td3"]
    assert list(task["runs"]) == ["baton"] and task["summary"]["baton"]["finals"] == [7.0, 7.0]
    assert peers.TASKS["halfcheetah-td3"].overrides  # the task has its own, which come first
    assert calls == [(*peers.TASKS["halfcheetah-td3"].overrides, "policy.amp=bf16")] * 2
    out = capsys.readouterr().out
    assert "no peer in this run" in out and "rl-baselines3-zoo" not in out  # nor SB3's settings line


def test_a_baton_set_key_the_config_lacks_stops_the_command_before_any_run(monkeypatch):
    monkeypatch.setattr(peers, "run_sb3", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(SystemExit, match="policy.learn.learning_rat"):
        peers.main(["--tasks", "cartpole-dqn", "--baton-set", "policy.learn.learning_rat=1e-3"])


@pytest.mark.parametrize("name", [name for name, task in peers.TASKS.items() if task.overrides])
def test_each_task_s_overrides_are_keys_its_config_takes(name):
    from commands.config_file import load_config_file
    from engine.overrides import apply_overrides

    task = peers.TASKS[name]
    main, _ = apply_overrides(*load_config_file(os.path.join(ROOT, task.config)), task.overrides)
    for item in task.overrides:
        key, text = item.split("=", 1)
        node = main
        for part in key.split("."):
            node = node[part]
        try:
            expected = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            expected = text
        assert node == expected, item
