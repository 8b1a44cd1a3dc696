"""The command-line options shared by ``baton train`` and every dizoo config run as a script."""
from __future__ import annotations

import argparse
from typing import Any, List, Optional, Sequence, Tuple

from .serial import serial_pipeline

__all__ = ["add_train_options", "parse_train_args", "run_from_args", "cli_main"]


def add_train_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("-s", "--seed", type=int, default=0, help="base seed (default 0)")
    parser.add_argument("--max-env-step", type=int, default=None, help="stop after this many env steps")
    parser.add_argument("--max-train-iter", type=int, default=None, help="stop after this many updates")
    parser.add_argument("--exp-name", default=None, help="experiment directory (default: the config's exp_name)")
    parser.add_argument("--resume", action="store_true", help="continue from <exp_name>/ckpt/latest.pth.tar")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    # torch.distributed.launch appends --local-rank=N (--local_rank before torch 2.0); LOCAL_RANK in the
    # environment carries the same value, which is what the runtime reads.
    parser.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, default=None,
                        help=argparse.SUPPRESS)
    return parser


def parse_train_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description="Train the pipeline of this config.")
    return add_train_options(parser).parse_args(argv)


def run_from_args(input_cfg: Tuple[Any, Any], args: argparse.Namespace) -> dict:
    """Run ``serial_pipeline`` with the parsed options and print its one-line result (an application's
    output, not library logging)."""

    summary = serial_pipeline(input_cfg, seed=args.seed, max_env_step=args.max_env_step,
                              max_train_iter=args.max_train_iter, exp_name=args.exp_name, resume=args.resume,
                              progress=False if args.no_progress else None)
    if summary:
        print(f"baton: {summary['stop_reason']}: eval_return={summary['eval_return']} "
              f"best_eval_return={summary['best_eval_return']} env_step={summary['env_step']} "
              f"train_iter={summary['train_iter']} wall_time_s={summary['wall_time_s']:.2f}", flush=True)
    return summary


def cli_main(input_cfg: Tuple[Any, Any], argv: Optional[List[str]] = None) -> dict:
    """Entry point of a dizoo config file: ``if __name__ == "__main__": cli_main((main_config, create_config))``."""
    return run_from_args(input_cfg, parse_train_args(argv))
