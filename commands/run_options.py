"""The options of the commands that read run directories (``baton eval``, ``export``, ``plot``, ``report``) and
the check that their directories exist, with nothing heavy imported: the parser and a wrong path answer at once,
before torch loads (the modules that do the work import it when they run).

The names a path may take and the files a run holds are defined here, once; the working modules import them.
"""
from __future__ import annotations

import argparse
import os
from typing import List, Optional

__all__ = ["add_eval_options", "add_export_options", "add_plot_options", "add_report_options", "missing_run_dirs",
           "EVAL_FILE", "FORMATS", "X_AXES", "SCORES", "CKPT_NAMES", "PROGRESS_FILE", "RUN_DIR_HINT"]

#: ``baton eval``'s result, beside the run's other files
EVAL_FILE = "eval.json"
#: ``baton export``'s formats and their file suffixes
FORMATS = {"torchscript": ".pt", "onnx": ".onnx"}
#: ``baton plot``'s x axes and their labels
X_AXES = {"env_step": "env steps", "wall_time_s": "wall time (s)"}
#: a run's score in ``baton report``
SCORES = ("final", "best", "eval")
#: the checkpoints ``--ckpt`` names (``middleware.checkpoint``'s ``BEST`` and ``LATEST``)
CKPT_NAMES = ("best", "latest")
#: the evaluation curve a run writes (``middleware.progress_csv.PROGRESS_FILE``; a test keeps them equal)
PROGRESS_FILE = "progress.csv"
#: what a missing run directory's line tells the user to give instead
RUN_DIR_HINT = "give the directory a training run wrote: the path its last line printed as run_dir=..."

_IMPORT_HELP = ("import MODULE first (repeatable): the module of an algorithm or env type of your own, which the run's "
                "config.json names in import_names; baton imports nothing a run directory names")
_CKPT_HELP = f"the checkpoint: {' or '.join(CKPT_NAMES)} of RUN_DIR/ckpt, or a path (default: best, else latest)"


def add_eval_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``baton eval`` (commands/evaluate.py)."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a training run's directory (config.json, ckpt/)")
    parser.add_argument("--ckpt", default=None, metavar="best|latest|PATH", help=_CKPT_HELP)
    parser.add_argument("--episodes", type=int, default=10, help="episodes to play (default 10)")
    parser.add_argument("-s", "--seed", type=int, default=0, help="env i is reset with seed + i (default 0)")
    parser.add_argument("--num-envs", type=int, default=None,
                        help="envs stepped together (default: env.evaluator_env_num, at most --episodes; 1 with "
                             "--video)")
    parser.add_argument("-o", "--output", default=None, help=f"the JSON result (default RUN_DIR/{EVAL_FILE})")
    parser.add_argument("--video", default=None, metavar="DIR", help="write env 0's episodes to DIR as mp4 "
                                                                     "(the video extra)")
    parser.add_argument("--gif", action="store_true", help="with --video: GIFs instead of mp4")
    parser.add_argument("--video-episodes", type=int, default=None, metavar="M",
                        help="with --video: film only the first M episodes")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=_IMPORT_HELP)
    return parser


def add_export_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``baton export`` (commands/export.py)."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a training run's directory (config.json, ckpt/)")
    parser.add_argument("--format", required=True, choices=tuple(FORMATS),
                        help="torchscript (.pt, torch.jit.load) or onnx (.onnx, onnxruntime; the export extra)")
    parser.add_argument("--ckpt", default=None, metavar="best|latest|PATH", help=_CKPT_HELP)
    parser.add_argument("-o", "--output", default=None,
                        help="the file to write (default RUN_DIR/policy_<checkpoint>.pt or .onnx)")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=_IMPORT_HELP)
    return parser


def add_plot_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``baton plot`` (commands/plot.py)."""
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR",
                        help="run directories (holding progress.csv), or directories of them")
    parser.add_argument("-o", "--output", default="progress.png", help="image to write (default progress.png)")
    parser.add_argument("--x", choices=tuple(X_AXES), default=None,
                        help="one panel against this x (default: env_step and wall_time_s side by side)")
    parser.add_argument("--label", action="append", default=None, metavar="NAME",
                        help="legend label: once for all runs (one group), or once per RUN_DIR in order; "
                             "default: the directory name less a _seed<N> suffix")
    return parser


def add_report_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``baton report`` (commands/report.py)."""
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR",
                        help="run directories (holding progress.csv), or directories of them")
    parser.add_argument("--score", choices=SCORES, default="final",
                        help="a run's score: its last evaluation (final, default), its best, or baton eval's mean")
    parser.add_argument("--label", action="append", default=None, metavar="NAME",
                        help="group label: once for all runs (one group), or once per RUN_DIR in order; default: "
                             "the directory name less a _seed<N> suffix")
    parser.add_argument("--confidence", type=float, default=0.95, help="the interval's coverage (default 0.95)")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap replicates (default 2000)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    return parser


def missing_run_dirs(command: str, args: argparse.Namespace) -> Optional[str]:
    """The line for the first path of ``command``'s arguments that does not exist, or None: what the working
    module would say, said before it is imported (the same words: tests/pipelines/test_cli_imports.py)."""
    paths: List[str] = [args.run_dir] if command in ("eval", "export") else list(args.runs)
    for path in paths:
        if command in ("eval", "export") and not os.path.isdir(path):
            return f"baton: {path}: no such run directory ({RUN_DIR_HINT})"
        if command in ("plot", "report") and not os.path.exists(path):
            return f"baton {command}: {path}: no such directory (looked for the run's {PROGRESS_FILE} there)"
    return None
