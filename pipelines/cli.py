"""The ``baton`` command (also ``python -m pipelines``).

Usage::

    baton train -c CONFIG [-s SEED] [--max-env-step N] [--max-train-iter N] [--exp-name NAME] [--resume]
                [--no-progress] [--gpus all|N | --nproc N] [--nnodes N --node-rank n
                (--master-addr HOST0 --master-port PORT | --rendezvous file:///shared/path)]
    baton check-ddp -c CONFIG [--nproc 2] [--tolerance 1e-5]

``CONFIG`` is a Python file defining ``main_config`` and ``create_config`` (a dizoo config). Under
``torch.distributed.launch`` the appended ``--local-rank`` is accepted and ignored (the runtime reads
``LOCAL_RANK`` from the environment).
"""
from __future__ import annotations

import argparse
import logging
import os
import runpy
import sys
from typing import Any, List, Optional, Tuple

from .options import add_train_options, check_launch_options, run_from_args

__all__ = ["main", "load_config_file"]


def load_config_file(path: str) -> Tuple[Any, Any]:
    """``(main_config, create_config)`` of a config file, without running its ``__main__`` block.

    Raises:
        FileNotFoundError: naming the path.
        ValueError: when the file does not define both names.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file not found: {path}")
    if not path.endswith(".py"):
        raise ValueError(f"config file {path}: a config is a Python file defining main_config and create_config "
                         f"(see dizoo/**/config/*_config.py); {os.path.splitext(path)[1] or 'this'} files are not read")
    try:
        namespace = runpy.run_path(path, run_name="__baton_config__")
    except SyntaxError as err:
        raise ValueError(f"config file {path}, line {err.lineno}: {err.msg} (a config is Python: main_config and "
                         f"create_config as dicts)") from err
    missing = [name for name in ("main_config", "create_config") if name not in namespace]
    if missing:
        raise ValueError(f"config file {path} does not define {' and '.join(missing)}")
    return namespace["main_config"], namespace["create_config"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="baton", description="Train RL pipelines from dizoo-style configs.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train the pipeline of a config file")
    train.add_argument("-c", "--config", required=True, help="path of a config file (main_config, create_config)")
    add_train_options(train)
    check = sub.add_parser("check-ddp", help="one learner update data-parallel against the same update in one "
                                             "process: can this model be trusted under DDP?")
    check.add_argument("-c", "--config", required=True, help="path of a config file (main_config, create_config)")
    check.add_argument("--nproc", type=int, default=2, help="processes to compare (default 2, gloo on CPU)")
    check.add_argument("-s", "--seed", type=int, default=0)
    check.add_argument("--tolerance", type=float, default=1e-5, help="largest parameter difference accepted")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "train":
        check_launch_options(args, parser.error)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    try:
        input_cfg = load_config_file(args.config)
    except (FileNotFoundError, ValueError) as err:
        print(f"baton: {err}", file=sys.stderr)
        return 2
    if args.command == "check-ddp":
        from .check_ddp import check_ddp

        if args.nproc < 2:
            parser.error(f"--nproc {args.nproc}: the check compares at least 2 processes")
        report = check_ddp(input_cfg, nproc=args.nproc, seed=args.seed, tolerance=args.tolerance)
        print(report, flush=True)
        return 0 if report["ok"] else 1
    run_from_args(input_cfg, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
