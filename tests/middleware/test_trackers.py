"""Experiment trackers (``log.wandb``, ``log.mlflow``): a real run sends its config, every scalar of the logger
under the TensorBoard names and the best checkpoint, read back from W&B's offline run file and through
MLflow's client; a tracker that cannot start or fails later is a warning and the run goes on."""
from __future__ import annotations

import copy
import glob
import json
import logging
import os
import re
import struct
import threading

import pytest

import middleware.trackers as trackers
from middleware.progress_csv import read_progress
from middleware.trackers import MlflowParams, Tracker, WandbParams, start_trackers
from commands.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
CLOCKS = {"env_step", "train_iter", "wall_time_s", "elapsed_s"}  # progress.csv's columns that are no scalars


def test_start_trackers_without_the_package_names_the_extra(monkeypatch, caplog, tmp_path):
    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with caplog.at_level(logging.WARNING):
        assert start_trackers({"wandb": WandbParams(enable=True)}, str(tmp_path), {}) == []
    assert 'log.wandb.enable=True, but wandb is not installed: pip install -c constraints.txt -e ".[wandb]"' in caplog.text
    assert "the run goes on without it" in caplog.text


class _Refuses(Tracker):
    name = "mlflow"

    def __init__(self, *args):
        raise ConnectionError("tracking server at http://nowhere:5000 does not answer")


class _FailsLater(Tracker):
    name = "mlflow"
    calls = 0

    def __init__(self, settings, run_dir, config, run_id=None):
        super().__init__()
        self.run_id = "r1"

    def _log_scalars(self, scalars, step):
        type(self).calls += 1
        raise OSError("disk quota exceeded")

    def _finish(self, artifacts):
        raise AssertionError("a broken tracker is not finished")


def test_a_tracker_that_cannot_start_is_a_warning_and_the_run_trains(monkeypatch, caplog, tmp_path):
    monkeypatch.setitem(trackers.TRACKERS, "mlflow", (_Refuses, "json", "mlflow"))
    with caplog.at_level(logging.WARNING):
        assert main(["train", "-c", CARTPOLE, "--max-env-step", "64", "--no-progress", "--exp-name",
                     str(tmp_path / "run"), "log.mlflow.enable=true", "log.tensorboard=false"]) == 0
    assert ("log.mlflow: json did not start (ConnectionError: tracking server at http://nowhere:5000 does not "
            "answer); the run goes on without it") in caplog.text
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["env_step"] >= 64


def test_a_tracker_that_fails_later_warns_once_and_stops_sending(monkeypatch, caplog, tmp_path):
    monkeypatch.setitem(trackers.TRACKERS, "mlflow", (_FailsLater, "json", "mlflow"))
    (started,) = start_trackers({"mlflow": MlflowParams(enable=True)}, str(tmp_path), {})
    with caplog.at_level(logging.WARNING):
        for step in range(3):
            started.log_scalars({"train/loss": 1.0}, step)
        started.finish([])
    assert _FailsLater.calls == 1 and caplog.text.count("log.mlflow: sending scalars failed (OSError") == 1
    assert json.loads((tmp_path / trackers.TRACKER_IDS_FILE).read_text()) == {"mlflow": "r1"}


def _wandb_records(path):
    """The protobuf records of a W&B run file (``run-<id>.wandb``): a LevelDB-style log of 32 KiB blocks after a
    7-byte W&B header, each chunk ``crc32c(4) length(2) type(1)`` (1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    raw = open(path, "rb").read()
    assert raw[:4] == b":W&B"
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if length == 0 and kind == 0:  # the zero padding of a block
            pos += left
            continue
        data, pos = raw[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 2):
            pending = data
        else:
            pending += data
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


@pytest.mark.timeout(300)
def test_wandb_offline_and_mlflow_get_config_scalars_and_best_checkpoint(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)  # MLflow's artifacts (./mlruns) and W&B's settings stay here
    monkeypatch.setenv("WANDB_SILENT", "true")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run = tmp_path / "run"
    assert main(["train", "-c", CARTPOLE, "--max-env-step", "256", "--no-progress", "--exp-name", str(run),
                 "policy.eval.evaluator.eval_freq=8", "log.wandb.enable=true", "log.wandb.mode=offline",
                 "log.wandb.project=baton-test", "log.mlflow.enable=true", f"log.mlflow.tracking_uri={uri}",
                 "log.mlflow.experiment=baton-test"]) == 0
    progress = read_progress(str(run / "progress.csv"))
    tags = set(progress) - CLOCKS  # what TensorBoard got: the CSV holds the same scalars (docs/logging.md)
    evaluations = [(int(step), value) for step, value in zip(progress["env_step"], progress["eval/episode_return_mean"])
                   if value == value]
    assert "eval/episode_return_mean" in tags and "train/loss" in tags and len(evaluations) >= 2
    ids = json.loads((run / trackers.TRACKER_IDS_FILE).read_text())

    # W&B: the offline run file, read back record by record
    (run_file,) = glob.glob(str(run / "wandb" / "offline-run-*" / f"run-{ids['wandb']}.wandb"))
    records = list(_wandb_records(run_file))
    config = {item.key: json.loads(item.value_json) for r in records if r.WhichOneof("record_type") == "run"
              for item in r.run.config.update}
    assert config["policy"]["learn"]["learning_rate"] == 0.002 and config["exp_name"] == str(run)
    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
               for r in records
               if r.WhichOneof("record_type") == "history"]
    sent = {key for row in history for key in row if not key.startswith("_")} - {"env_step"}
    assert sent == tags
    assert [(row["env_step"], row["eval/episode_return_mean"]) for row in history
            if "eval/episode_return_mean" in row] == evaluations
    (artifact,) = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert artifact.type == "model" and [entry.path for entry in artifact.manifest.contents] == ["best.pth.tar"]

    # MLflow: its SQLite store, read back through its client
    client = MlflowClient(uri)
    found = client.get_run(ids["mlflow"])
    assert found.info.status == "FINISHED" and found.info.run_name == "run"
    assert set(found.data.metrics) == tags
    assert found.data.params["policy.learn.learning_rate"] == "0.002"
    assert [(m.step, m.value) for m in client.get_metric_history(ids["mlflow"], "eval/episode_return_mean")] \
        == evaluations
    assert [a.path for a in client.list_artifacts(ids["mlflow"], "checkpoints")] == ["checkpoints/best.pth.tar"]
    config_file = client.download_artifacts(ids["mlflow"], "config.json", str(tmp_path))
    assert json.load(open(config_file))["policy"]["learn"]["learning_rate"] == 0.002


class _Recorder(Tracker):
    """A tracker that keeps what it is sent."""
    name = "mlflow"

    def __init__(self):
        super().__init__()
        self.run_id, self.sent, self.finished = "r7", [], None

    def _log_scalars(self, scalars, step):
        self.sent.append((step, dict(scalars)))

    def _finish(self, artifacts, failed=False):
        self.finished, self.failed = list(artifacts), failed


def test_a_starting_tracker_keeps_the_writes_made_before_it_is_up_and_sends_them_in_order(tmp_path):
    gate, recorder = threading.Event(), _Recorder()
    kept_ids = []

    def start():
        assert gate.wait(30)
        return recorder

    tracker = trackers.StartingTracker("mlflow", start, kept_ids.append)
    for step in range(3):  # the run goes on while the tracker starts: no write waits for it
        tracker.log_scalars({"train/loss": float(step)}, step)
    assert not tracker.wait_started(0.05) and recorder.sent == []
    gate.set()
    assert tracker.wait_started(30) and kept_ids == [recorder]
    tracker.log_scalars({"train/loss": 3.0}, 3)
    best = tmp_path / "best.pth.tar"
    best.write_bytes(b"x")
    tracker.finish([str(best), str(tmp_path / "absent")])
    assert recorder.sent == [(step, {"train/loss": float(step)}) for step in range(4)]
    assert recorder.finished == [str(best)] and tracker.run_id == "r7"


def test_the_end_of_a_run_waits_for_a_start_under_way_then_says_what_was_not_sent(caplog):
    gate = threading.Event()
    tracker = trackers.StartingTracker("wandb", lambda: gate.wait(60) and _Recorder(), wait_s=0.2)
    tracker.log_scalars({"train/loss": 1.0}, 0)
    with caplog.at_level(logging.INFO):
        tracker.finish([])
    gate.set()
    assert "log.wandb: waiting for it to start (at most 0 s more)" in caplog.text
    assert ("log.wandb: still starting after 1 s; this run's scalars were not sent to it (they are in TensorBoard "
            "and progress.csv)") in caplog.text


def test_a_slow_tracker_start_does_not_hold_the_run_back(monkeypatch, tmp_path):
    """A tracker whose start takes longer than the whole run (a tracking server's timeout) starts beside it:
    the first iteration does not wait for it, and it still gets every write of the logger."""
    first_iteration, seen = threading.Event(), {}

    class _Slow(_Recorder):
        def __init__(self, settings, run_dir, config, run_id=None):
            seen["iterated before the start ended"] = first_iteration.wait(20)
            super().__init__()
            seen["tracker"] = self

    real_log = trackers.StartingTracker._log_scalars

    def log_and_mark(self, scalars, step):
        first_iteration.set()
        real_log(self, scalars, step)

    monkeypatch.setitem(trackers.TRACKERS, "mlflow", (_Slow, "json", "mlflow"))
    monkeypatch.setattr(trackers.StartingTracker, "_log_scalars", log_and_mark)
    run = tmp_path / "run"
    assert main(["train", "-c", CARTPOLE, "--max-env-step", "256", "--no-progress", "--exp-name", str(run),
                 "policy.eval.evaluator.eval_freq=8", "log.mlflow.enable=true", "log.tensorboard=false"]) == 0
    assert seen["iterated before the start ended"]
    progress = read_progress(str(run / "progress.csv"))
    assert [step for step, _ in seen["tracker"].sent] == [int(step) for step in progress["env_step"]]
    assert seen["tracker"].finished == [str(run / "ckpt" / "best.pth.tar")]
    assert json.loads((run / trackers.TRACKER_IDS_FILE).read_text()) == {"mlflow": "r7"}


def test_a_resume_says_when_its_mlflow_run_holds_scalars_past_the_checkpoint(tmp_path, monkeypatch, caplog):
    """A killed run's scalars after its last checkpoint stay in MLflow (it deletes no points): the resume says so."""
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    settings = trackers.MlflowParams(enable=True, tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    first = trackers.MlflowTracker(settings, str(tmp_path / "run"), {"seed": 0})
    for step in (100, 200, 300, 400):
        first.log_scalars({"eval/episode_return_mean": float(step)}, step)
    def said():
        return [r for r in caplog.records if r.name == "middleware.trackers" and r.levelno >= logging.WARNING]

    with caplog.at_level(logging.WARNING, logger="middleware.trackers"):
        trackers.MlflowTracker(settings, str(tmp_path / "run"), {"seed": 0}, first.run_id, resume_env_step=400)
        assert not said()  # a checkpoint at the last point: nothing past it
        trackers.MlflowTracker(settings, str(tmp_path / "run"), {"seed": 0}, first.run_id, resume_env_step=200)
    [record] = said()
    assert re.search(r"holds 2 scalars past env_step 200, .* \(up to env_step 400\)", record.getMessage())


@pytest.mark.parametrize("fails", [False, True])
def test_a_run_an_error_ends_marks_its_tracker_run_failed(monkeypatch, tmp_path, fails):
    """MLflow showed a run an error or Ctrl-C ended as FINISHED: the tracker's run now ends failed then."""
    from pipelines import build_pipeline

    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
    seen = {}

    class _Kept(_Recorder):
        def __init__(self, settings, run_dir, config, run_id=None):
            super().__init__()
            seen["tracker"] = self

    monkeypatch.setitem(trackers.TRACKERS, "mlflow", (_Kept, "json", "mlflow"))
    main = copy.deepcopy(main_config)
    main.log = dict(progress=False, tensorboard=False, mlflow=dict(enable=True))
    pipeline = build_pipeline((main, create_config), max_env_step=256, exp_name=str(tmp_path / "run"))

    def broken(ctx):
        if fails and ctx.train_iter > 0:
            raise RuntimeError("a bug of the run")

    pipeline.insert_after("learner", broken, name="broken")
    if fails:
        with pytest.raises(RuntimeError, match="a bug of the run"):
            pipeline.run()
    else:
        pipeline.run()
    assert seen["tracker"].failed is fails
