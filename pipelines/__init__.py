"""The top floor: the only package that composes middleware and policies. The standard pipeline of a
config (``build_pipeline``, ``serial_pipeline``), the ``baton`` command (``python -m pipelines``), and the
options shared by ``baton train`` and every dizoo config run as a script (``cli_main``)."""
from .options import cli_main, parse_train_args
from .pipeline import Pipeline, RunInterrupted, RunPreempted, Stage, StageError
from .serial import build_pipeline, serial_pipeline

__all__ = ["build_pipeline", "serial_pipeline", "Pipeline", "RunInterrupted", "RunPreempted", "Stage", "StageError",
           "cli_main", "parse_train_args"]
