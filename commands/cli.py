"""The ``baton`` command (also ``python -m commands``).

Usage::

    baton train (-c CONFIG | --algo ALGO --env ENV_ID) [KEY=VALUE ...] [-s SEED] [--max-env-step N]
                [--max-train-iter N] [--exp-name NAME] [--resume] [--no-progress] [--gpus all|N | --nproc N]
                [--nnodes N --node-rank n (--master-addr HOST0 --master-port PORT | --rendezvous file:///shared/path)]
    baton train --list-algos | --list-envs
    baton train -c CONFIG --explain KEY       # what a config key means (its reader's declaration)
    baton check-ddp -c CONFIG [--nproc 2] [--tolerance 1e-5] [KEY=VALUE ...]
    baton tune -c CONFIG --trials N [--jobs K] [--study-dir DIR] --max-env-step N KEY=DIST ... [KEY=VALUE ...]
    baton record -c CONFIG --ckpt PATH --episodes N --dataset NAME [--eps E] [--root DIR]
    baton plot RUN_DIR... [-o out.png] [--x env_step|wall_time_s] [--label NAME]
    baton eval RUN_DIR [--ckpt best|latest|PATH] [--episodes N] [--seed S] [-o FILE] [--video DIR [--gif]] [--import M]
    baton export RUN_DIR --format torchscript|onnx [--ckpt best|latest|PATH] [-o FILE] [--import MODULE]
    baton report RUN_DIR... [--score final|best|eval] [--label NAME] [--json FILE]

``CONFIG`` is a Python file defining ``main_config`` and ``create_config`` (a dizoo config). Under
``torch.distributed.launch`` the appended ``--local-rank`` is accepted and ignored (the runtime reads
``LOCAL_RANK`` from the environment).

``KEY=VALUE`` words set config keys by dotted path, typed as the field's default and checked like the file's
keys (``policy.learn.batch_size=128 env.stop_value=none``; engine/overrides.py); every process started by
``--nproc``/``--gpus`` gets them, and under torchrun each process reads them from its own argv. ``--algo ALGO
--env ENV_ID`` trains without a config file: the algorithm's and the env family's defaults, the model sized
from the env's spaces, ``exp_name`` ``<algo>_<env id>`` (commands/algo_env.py). An unknown key, a value of
the wrong type, or an unknown algo or env ends with one line on stderr and exit status 2.

What trains nothing imports neither torch nor gymnasium: ``--help`` (of every command), ``--list-algos`` and
``--list-envs`` (from the table of commands/catalog.py) and the argument errors answer at once; the modules
that train are imported by the functions that use them, and ``record``'s and ``plot``'s options are added to
the parser only when that command is the one given (as are ``eval``'s, ``export``'s and ``report``'s).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, List, Optional, Sequence, Tuple

from engine.overrides import apply_overrides
from engine.registry import UnknownTypeError

from .options import (configure_logging, add_train_options, check_launch_options, resume_last, run_from_args,
                      signals_end_the_command, take_overrides)
from .config_file import load_config_file
from .run_options import missing_run_dirs
from .user_errors import exit_status, print_user_error

__all__ = ["main"]

#: commands whose options are defined by a module of their own (the ones reading run directories: by the light
#: commands.run_options): name -> (module, its function adding the options, the command's help)
_COMMAND_MODULES = {
    # an Optuna study over config keys (commands/tune.py); optuna is imported only when it runs
    "tune": ("tune", "add_tune_options", "search config keys with Optuna: trials as runs, the best as a config"),
    # a Minari dataset from a trained checkpoint (commands/record.py)
    "record": ("record", "add_record_options", "record episodes of a trained checkpoint as a dataset"),
    # evaluation curves of runs (their progress.csv); matplotlib is imported only when plotting
    "plot": ("run_options", "add_plot_options", "draw the evaluation return of runs (seeds grouped: IQM and its "
                                                "95%% bootstrap CI) to a PNG"),
    # after training (docs/after_training.md): watch, ship and report a trained run
    "eval": ("run_options", "add_eval_options", "greedy episodes of a trained run's checkpoint: return mean, std, "
                                             "count as JSON; --video DIR films them"),
    "export": ("run_options", "add_export_options", "the acting policy of a run's checkpoint as one TorchScript or ONNX "
                                               "file that runs without baton"),
    "report": ("run_options", "add_report_options", "a table of runs grouped over seeds: interquartile mean of their "
                                               "scores with a 95%% stratified-bootstrap CI"),
}
#: commands that read run directories only: module -> its main function (they take no config)
_RUN_COMMANDS = {"plot": ("plot", "plot_main"), "eval": ("evaluate", "eval_main"),
                 "export": ("export", "export_main"), "report": ("report", "report_main")}


def _parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The ``baton`` parser; ``command`` (the word after ``baton``) also gets the options of its module."""
    parser = argparse.ArgumentParser(prog="baton", description="Train RL pipelines from dizoo-style configs.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train the pipeline of a config file, or of --algo on --env")
    train.add_argument("-c", "--config", default=None, help="path of a config file (main_config, create_config)")
    train.add_argument("--algo", default=None, help="instead of -c: a registered algorithm (--list-algos), or "
                       "MODULE:NAME of your own module ...")
    train.add_argument("--env", default=None, metavar="ENV_ID", help="... on a gymnasium id, e.g. CartPole-v1, "
                                                                     "ALE/Pong-v5 (--list-envs)")
    train.add_argument("--list-algos", action="store_true", help="print the algorithms and the actions they take")
    train.add_argument("--list-envs", action="store_true", help="print the env families and known ids")
    train.add_argument("--explain", default=None, metavar="KEY", help="print what a config key (or every key of a "
                       "section, e.g. policy.learn) means, its type, default, rule and value in this config; "
                       "trains nothing")
    add_train_options(train)
    check = sub.add_parser("check-ddp", help="one learner update data-parallel against the same update in one "
                                             "process: can this model be trusted under DDP?")
    check.add_argument("-c", "--config", required=True, help="path of a config file (main_config, create_config)")
    check.add_argument("--nproc", type=int, default=2, help="processes to compare (default 2, gloo on CPU)")
    check.add_argument("-s", "--seed", type=int, default=0)
    check.add_argument("--tolerance", type=float, default=1e-5, help="largest parameter difference accepted")
    check.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE",
                       help="set config keys as for train, e.g. ddp.comm_hook=fp16 ddp.static_graph=true")
    for name, (module, add_options, help_text) in _COMMAND_MODULES.items():
        command_parser = sub.add_parser(name, help=help_text)
        if name == command:
            getattr(importlib.import_module(f".{module}", __package__), add_options)(command_parser)
    return parser


def _command(argv: Optional[Sequence[str]]) -> Optional[str]:
    """The command word of ``argv`` (``baton`` itself takes no option but ``--help``, so the first word
    that is not an option), or None."""
    return next((word for word in (sys.argv[1:] if argv is None else argv) if not word.startswith("-")), None)


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser(_command(argv))
    args, extras = parser.parse_known_args(resume_last(argv))
    take_overrides(args, extras, parser.error, parser)
    if args.command == "tune":  # its KEY=DIST words are no overrides of one config
        from .tune import tune_main

        return tune_main(args)
    if args.command in _RUN_COMMANDS:
        missing = missing_run_dirs(args.command, args)
        if missing is not None:  # before the working module (and torch) loads
            print(missing, file=sys.stderr, flush=True)
            return 2
        module, function = _RUN_COMMANDS[args.command]
        if args.command != "plot":
            configure_logging()
        return getattr(importlib.import_module(f".{module}", __package__), function)(args)
    if args.command == "train":  # a preemption signal before the run's first iteration: one line, 128 + its number
        with signals_end_the_command():
            return _config_command(args, parser)
    return _config_command(args, parser)


def _config_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``train``, ``record``, ``check-ddp``: the commands of a config (``-c``, or ``--algo``/``--env``)."""
    if args.command == "train":
        if args.list_algos or args.list_envs:
            from .catalog import describe_algos, describe_envs

            print("\n\n".join(text() for wanted, text in ((args.list_algos, describe_algos),
                                                         (args.list_envs, describe_envs)) if wanted))
            return 0
        _check_config_source(args, parser.error)
        check_launch_options(args, parser.error)
    configure_logging()

    try:
        input_cfg = _input_config(args)
    except (FileNotFoundError, ValueError, UnknownTypeError) as err:
        print_user_error(err)  # after its traceback under --debug
        return exit_status(err)
    if args.command == "train" and args.explain is not None:
        from .explain import explain_main

        try:
            return explain_main(args.explain, input_cfg)
        except ValueError as err:  # ConfigError: an unknown key, or the config's own
            print_user_error(err)
            return exit_status(err)
    if args.command == "record":
        from .record import record_main

        return record_main(input_cfg, args)
    if args.command == "check-ddp":
        from .check_ddp import check_ddp

        if args.nproc < 2:
            parser.error(f"--nproc {args.nproc}: the check compares at least 2 processes")
        try:
            report = check_ddp(input_cfg, nproc=args.nproc, seed=args.seed, tolerance=args.tolerance)
        except ValueError as err:  # a config the check cannot run (ConfigError): one line
            print_user_error(err)
            return exit_status(err)
        print(report, flush=True)
        return 0 if report["ok"] else 1
    run_from_args(input_cfg, args)
    return 0


def _check_config_source(args: argparse.Namespace, error: Any) -> None:
    """A run's config comes one way: ``-c CONFIG``, or ``--algo`` with ``--env``."""
    if args.config is not None and (args.algo is not None or args.env is not None):
        error("give -c CONFIG or --algo ALGO --env ENV_ID, not both")
    if args.config is None and (args.algo is None or args.env is None):
        error("give -c CONFIG, or --algo ALGO --env ENV_ID (see baton train --list-algos / --list-envs)")


def _input_config(args: argparse.Namespace) -> Tuple[Any, Any]:
    """``(main_config, create_config)`` of the file or of ``--algo/--env``, with the ``KEY=VALUE`` overrides set.

    Raises:
        FileNotFoundError, ValueError (ConfigError, AlgoEnvError), UnknownTypeError: each names what to fix.
    """
    if args.config is None:
        from .algo_fit import AlgoEnvError, declared_misfit

        misfit = declared_misfit(args.algo, args.env)  # before torch is imported: the common mistake at once
        if misfit is not None:
            raise AlgoEnvError(misfit)
        from .algo_env import build_config, default_budget

        input_cfg = build_config(args.algo, args.env)
        if args.max_env_step is None and args.max_train_iter is None:  # every run has an end (docs: --algo)
            args.max_env_step = default_budget(args.algo)
    else:
        input_cfg = load_config_file(args.config)
    overrides = getattr(args, "overrides", None)
    return apply_overrides(input_cfg[0], input_cfg[1], overrides) if overrides else input_cfg


if __name__ == "__main__":
    sys.exit(main())
