"""Ready-made pipelines: the top floor, composing middleware and policies. Nothing in the engine core
imports this package."""
from .serial import serial_pipeline
from .cli_args import cli_main, parse_train_args

__all__ = ["serial_pipeline", "cli_main", "parse_train_args"]
