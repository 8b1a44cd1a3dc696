"""Experiment trackers beside TensorBoard: Weights & Biases (``log.wandb``) and MLflow (``log.mlflow``).

Each is an optional extra (``pip install -e ".[wandb]"`` / ``".[mlflow]"``) and, when its ``enable`` is set,
gets from rank 0 (the logger's rank):

- the compiled config, when the run starts (W&B: the run's config; MLflow: flattened dotted keys as params,
  and the whole config as the artifact ``config.json``);
- every scalar the logger writes to TensorBoard, under the same tag (``eval/episode_return_mean``,
  ``train/loss``, ...) against ``env_step``: the logger's one write sends the same dict to each sink
  (``middleware.logger.OnlineLogger``). W&B plots them against its ``env_step`` metric (its own step only
  counts the writes, so a background evaluation's result, logged at its older ``env_step``, is kept);
- the best checkpoint (``ckpt/best.pth.tar``) as an artifact when the run ends (W&B: an artifact of type
  ``model``; MLflow: under ``checkpoints/``).

A tracker never stops a run: one that cannot start (its package missing, no API key, a tracking server
that does not answer) is a warning that names the reason and the run goes on without it, and one that fails
later warns once and stops sending. A resumed run continues the tracker runs it started (their ids are in
``<run dir>/trackers.json``).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from engine.fileio import atomic_write_json
from engine.params import Params, param

__all__ = ["WandbParams", "MlflowParams", "Tracker", "StartingTracker", "WandbTracker", "MlflowTracker", "start_trackers", "TRACKERS", "TRACKER_IDS_FILE"]

logger = logging.getLogger(__name__)

TRACKER_IDS_FILE = "trackers.json"


@dataclass
class WandbParams(Params):
    """The config's ``log.wandb`` section: Weights & Biases from rank 0 (config, every scalar, the best
    checkpoint; extra ``wandb``)."""

    enable: bool = param(False)
    """Start a W&B run beside TensorBoard."""
    project: str = param("baton")
    """The W&B project."""
    entity: str = param("")
    """The W&B entity (team or user); "": W&B's default."""
    name: str = param("")
    """The W&B run's name; "": the run directory's name."""
    mode: str = param("")
    """"online", "offline" (files under ``<exp_name>/wandb``, uploaded later by ``wandb sync``) or "disabled";
    "": W&B's own (``WANDB_MODE``)."""
    tags: List[str] = param([])
    """Tags of the W&B run."""


@dataclass
class MlflowParams(Params):
    """The config's ``log.mlflow`` section: MLflow from rank 0 (config, every scalar, the best checkpoint;
    extra ``mlflow``)."""

    enable: bool = param(False)
    """Start an MLflow run beside TensorBoard."""
    tracking_uri: str = param("")
    """Where the runs go: "file:/path/mlruns", "sqlite:///m.db", "http://host:5000"; "": MLflow's own
    (``MLFLOW_TRACKING_URI`` or its default)."""
    experiment: str = param("baton")
    """The MLflow experiment's name."""
    run_name: str = param("")
    """The MLflow run's name; "": the run directory's name."""


class Tracker:
    """One tracker's run, as the logger and the pipeline use it. Subclasses start the run in ``__init__``
    (raising when they cannot) and implement ``_log_scalars`` and ``_finish``; the public methods guard them.

    Attributes:
        name: the config section (``wandb``, ``mlflow``).
        run_id: the tracker's id of this run, kept in ``trackers.json`` for a resume.
    """

    name = "tracker"
    run_id: str = ""

    def __init__(self) -> None:
        self._broken = False

    def log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """The logger's scalars of one write, at ``step`` (env steps)."""
        self._guard("sending scalars", self._log_scalars, scalars, step)

    def finish(self, artifacts: Sequence[str] = (), failed: bool = False) -> None:
        """Upload the files of ``artifacts`` that exist (the best checkpoint) and end the tracker's run; ``failed``:
        the run ended by an error or Ctrl-C, which the tracker's run shows (MLflow ``FAILED``, W&B a non-zero exit
        code), not as a run that finished."""
        self._guard("ending the run", self._finish, [path for path in artifacts if os.path.isfile(path)], failed)
        self._broken = True  # finished: nothing more is sent

    def _guard(self, what: str, call: Callable[..., None], *args: Any) -> None:
        if self._broken:
            return
        try:
            call(*args)
        except Exception as err:  # the tracker's trouble is not the run's: say it once, then stop sending
            self._broken = True
            logger.warning("log.%s: %s failed (%s: %s); the run goes on without %s", self.name, what,
                           type(err).__name__, err, self.name)

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def _finish(self, artifacts: Sequence[str], failed: bool = False) -> None:
        raise NotImplementedError


class WandbTracker(Tracker):
    """A Weights & Biases run in ``<run dir>/wandb``.

    Settings: ``WandbParams`` (``log.wandb``)."""

    name = "wandb"

    def __init__(self, settings: WandbParams, run_dir: str, config: Mapping[str, Any],
                 run_id: Optional[str] = None, resume_env_step: Optional[int] = None) -> None:
        super().__init__()
        import wandb

        self._wandb = wandb
        self._run_name = settings.name or os.path.basename(os.path.abspath(run_dir))
        self.run = wandb.init(project=settings.project or None, entity=settings.entity or None,
                              name=self._run_name, dir=run_dir, id=run_id or None,
                              resume="allow" if run_id else None, mode=settings.mode or None,
                              config=dict(config), tags=list(settings.tags) or None,
                              reinit="create_new", settings=wandb.Settings(console="off", quiet=True))
        self.run.define_metric("env_step")
        self.run.define_metric("*", step_metric="env_step")
        self.run_id = self.run.id

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        self.run.log({"env_step": step, **scalars})

    def _finish(self, artifacts: Sequence[str], failed: bool = False) -> None:
        for path in artifacts:
            name = re.sub(r"[^\w.-]", "_", f"{self._run_name}-{os.path.basename(path).split('.')[0]}")
            artifact = self._wandb.Artifact(name=name, type="model")
            artifact.add_file(path)
            self.run.log_artifact(artifact)
        self.run.finish(exit_code=1 if failed else 0)


class MlflowTracker(Tracker):
    """An MLflow run, written through ``MlflowClient`` (no global active run: two pipelines in one process
    write their own runs).

    Settings: ``MlflowParams`` (``log.mlflow``)."""

    name = "mlflow"
    #: MLflow takes at most this many params (and 1000 metrics) in one log_batch
    _BATCH = 100

    def __init__(self, settings: MlflowParams, run_dir: str, config: Mapping[str, Any],
                 run_id: Optional[str] = None, resume_env_step: Optional[int] = None) -> None:
        super().__init__()
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self._metric = Metric
        self.client = MlflowClient(tracking_uri=settings.tracking_uri or None)
        if run_id:  # a resumed baton run continues its MLflow run (its params were logged then)
            self.client.update_run(run_id, status="RUNNING")
            self.run_id = run_id
            if resume_env_step is not None:
                with contextlib.suppress(Exception):  # a check of what is there: never a reason not to send
                    self._say_points_past(resume_env_step)
            return
        experiment = settings.experiment or "baton"
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
        run = self.client.create_run(experiment_id, run_name=settings.run_name
                                     or os.path.basename(os.path.abspath(run_dir)),
                                     tags={"baton.run_dir": os.path.abspath(run_dir)})
        self.run_id = run.info.run_id
        params = [Param(key, str(value)[:6000]) for key, value in _flatten(config).items()]
        for start in range(0, len(params), self._BATCH):
            self.client.log_batch(self.run_id, params=params[start:start + self._BATCH])
        self.client.log_dict(self.run_id, dict(config), "config.json")

    def _say_points_past(self, env_step: int) -> None:
        """Warn when the run holds scalars past ``env_step``, the checkpoint a resume goes on from: the killed
        process logged them after its last checkpoint, progress.csv drops them, and MLflow cannot delete them, so
        the run's curves would hold the lost stretch and the resumed one, interleaved, with nothing said."""
        past = [metric.step for key in self.client.get_run(self.run_id).data.metrics
                for metric in self.client.get_metric_history(self.run_id, key) if metric.step > env_step]
        if past:
            logger.warning("log.mlflow: run %s holds %d scalars past env_step %d, the checkpoint this run resumes "
                           "from (up to env_step %d): the killed run logged them after its last checkpoint; "
                           "progress.csv dropped them, MLflow cannot, so past %d its curves hold the killed run's "
                           "points and this one's (remove %s before resuming to send the resumed run to a new MLflow "
                           "run instead)", self.run_id, len(past), env_step, max(past), env_step, TRACKER_IDS_FILE)

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        stamp = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[self._metric(key, float(value), stamp, int(step))
                                                    for key, value in scalars.items()])

    def _finish(self, artifacts: Sequence[str], failed: bool = False) -> None:
        for path in artifacts:
            self.client.log_artifact(self.run_id, path, artifact_path="checkpoints")
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


#: config section -> (tracker class, the module it needs, the setup.py extra that installs it)
TRACKERS = {"wandb": (WandbTracker, "wandb", "wandb"), "mlflow": (MlflowTracker, "mlflow", "mlflow")}


#: how long the end of a run waits for a tracker still starting (W&B's ``init_timeout`` is 90 s by default)
START_WAIT_S = 120.0


class StartingTracker(Tracker):
    """A tracker started in a thread of its own, so that its start-up (W&B's service process, MLflow's store and
    its tables: seconds on a laptop, a server's timeout on a cluster node) overlaps the run's build and first
    iterations instead of preceding them. The logger's writes before it is up are kept and sent, in order, with
    the first write after it (or at the end); the end of the run waits for a start still under way, at most
    ``wait_s``, saying so when it is not at once.

    Attributes:
        name: the tracker's config section.
        tracker: the started tracker; None while it starts, or when it could not.
    """

    def __init__(self, name: str, start: Callable[[], Tracker], on_started: Callable[[Tracker], None] = lambda _: None,
                 wait_s: float = START_WAIT_S, package: str = "") -> None:
        super().__init__()
        self.name, self.tracker, self._wait_s, self._package = name, None, wait_s, package or name
        self._kept: List[tuple] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._start, args=(start, on_started), daemon=True,
                                        name=f"baton-{name}-start")
        self._thread.start()

    @property
    def run_id(self) -> str:  # type: ignore[override]
        return self.tracker.run_id if self.tracker is not None else ""

    def _start(self, start: Callable[[], Tracker], on_started: Callable[[Tracker], None]) -> None:
        try:
            tracker = start()
        except Exception as err:  # a key, a server, a quota: the tracker's, never the run's
            logger.warning("log.%s: %s did not start (%s: %s); the run goes on without it (check log.%s in the "
                           "config)", self.name, self._package, type(err).__name__, err, self.name)
        else:
            self.tracker = tracker
            try:
                on_started(tracker)
            except OSError as err:
                logger.warning("log.%s: its run id was not kept in %s (%s); a resume of this run starts a new %s "
                               "run", self.name, TRACKER_IDS_FILE, err, self.name)
        finally:
            self._done.set()

    def wait_started(self, timeout: Optional[float] = None) -> bool:
        """Whether the start has ended (started or not) within ``timeout`` seconds."""
        return self._done.wait(timeout)

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        self._kept.append((dict(scalars), step))
        if self._done.is_set():
            self._send_kept()

    def _send_kept(self) -> None:
        kept, self._kept = self._kept, []
        if self.tracker is not None:
            for scalars, step in kept:
                self.tracker.log_scalars(scalars, step)

    def _finish(self, artifacts: Sequence[str], failed: bool = False) -> None:
        if not self._done.wait(1.0):
            logger.info("log.%s: waiting for it to start (at most %.0f s more) to send this run's scalars",
                        self.name, self._wait_s)
            if not self._done.wait(self._wait_s):
                logger.warning("log.%s: still starting after %.0f s; this run's scalars were not sent to it (they "
                               "are in TensorBoard and progress.csv)", self.name, self._wait_s + 1.0)
                return
        self._send_kept()
        if self.tracker is not None:
            self.tracker.finish(artifacts, failed)


def start_trackers(settings: Mapping[str, Params], run_dir: str, config: Mapping[str, Any],
                   resume_env_step: Optional[int] = None) -> List[Tracker]:
    """The trackers that ``settings`` (tracker name -> its section: ``WandbParams``, ``MlflowParams``) enables,
    for the run in ``run_dir`` with ``config`` (plain data), each starting in the background
    (``StartingTracker``); ``resume_env_step``: a resumed run's checkpoint, past which a tracker run it continues
    should hold nothing (MLflow says so when it does). One whose package is missing is a warning here and is left
    out; one that cannot start is a warning from its start, and sends nothing.

    Examples:
        >>> start_trackers({"wandb": WandbParams(), "mlflow": MlflowParams()}, "run", {})
        []
    """
    wanted = [name for name in TRACKERS if name in settings and settings[name].enable]
    if not wanted:
        return []
    ids = _read_ids(run_dir)
    lock = threading.Lock()

    def keep_id(name: str, tracker: Tracker) -> None:
        with lock:
            ids[name] = tracker.run_id
            os.makedirs(run_dir, exist_ok=True)
            atomic_write_json(os.path.join(run_dir, TRACKER_IDS_FILE), ids)

    trackers: List[Tracker] = []
    for name in wanted:
        cls, module, extra = TRACKERS[name]
        if importlib.util.find_spec(module) is None:
            logger.warning("log.%s.enable=True, but %s is not installed: pip install -c constraints.txt -e \".[%s]\" (or pip install %s);"
                           " the run goes on without it", name, module, extra, module)
            continue
        try:  # here: an import is CPU, and in the start's thread it would only contend for the GIL
            importlib.import_module(module)
        except Exception as err:
            logger.warning("log.%s: %s did not import (%s: %s); the run goes on without it", name, module,
                           type(err).__name__, err)
            continue
        resumed = {} if resume_env_step is None else {"resume_env_step": resume_env_step}  # a new run: as ever
        trackers.append(StartingTracker(name, functools.partial(cls, settings[name], run_dir, config, ids.get(name),
                                                                **resumed),
                                        functools.partial(keep_id, name), package=module))
    return trackers


def _read_ids(run_dir: str) -> Dict[str, str]:
    path = os.path.join(run_dir, TRACKER_IDS_FILE)
    try:
        with open(path) as f:
            ids = json.load(f)
    except (OSError, ValueError):
        return {}
    return {key: value for key, value in ids.items() if isinstance(value, str)} if isinstance(ids, dict) else {}


def _flatten(config: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; an empty section is kept as ``{}``."""
    flat: Dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat
