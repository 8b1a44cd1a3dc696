"""The command-line options shared by ``baton train`` and every dizoo config run as a script.

Besides the run's own options, these start the data-parallel processes themselves (``engine.launch``), so
no torchrun line is needed: ``--gpus all`` (one process per visible GPU, nccl), ``--nproc N`` (N processes,
gloo on CPU), and for several machines ``--nnodes N --node-rank n`` with ``--master-addr/--master-port`` or
``--rendezvous file:///shared/path``.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import difflib
import logging
import os
import sys
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from engine.devices import usable_cores, visible_gpu_count
from engine.distributed import RendezvousError
from engine.config import ConfigError
from engine.launcher import check_rendezvous, launch
from engine.overrides import apply_overrides
from engine.preemption import DEFAULT_SIGNALS, Preempted, stop_signals
from engine.profile import profile_table
from engine.slurm import srun_task_count
from engine.registry import UnknownTypeError

from pipelines.pipeline import RunInterrupted, RunPreempted
from .user_errors import DEBUG_ENV, ENVIRONMENT_EXIT, print_user_error  # stdlib only: USER_ERRORS on first use

logger = logging.getLogger(__name__)

__all__ = ["configure_logging", "add_train_options", "parse_train_args", "take_overrides", "check_launch_options",
           "resume_last",
           "run_from_args", "signals_end_the_command",
           "cli_main"]


def add_train_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("-s", "--seed", type=int, default=None,
                        help="base seed (default: the config's seed, a seed=N override, else 0)")
    parser.add_argument("--max-env-step", type=int, default=None, help="stop after this many env steps")
    parser.add_argument("--max-train-iter", type=int, default=None, help="stop after this many updates")
    parser.add_argument("--exp-name", default=None,
                        help="the run directory (default: <config exp_name>_seed<seed>, numbered _2, _3... when taken)")
    parser.add_argument("--resume", nargs="?", const=True, default=False, metavar="auto",
                        help="continue the run (without --exp-name: the newest of this config and seed) from its "
                             "newest checkpoint; '--resume auto': continue it if there is one, else start it "
                             "(requeued jobs, restarts)")
    parser.add_argument("--force", action="store_true",
                        help="start over in a run directory that holds a run (the old one is moved aside first)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--profile", action="store_true",
                        help="report each stage's share of the iteration time (log.profile): a table at the end, "
                             "summary.json 'profile', TensorBoard profile/<stage>_share")
    parser.add_argument("--debug", action=_Debug,
                        help=f"show the traceback of a user error too, before its one baton: line ({DEBUG_ENV}=1 "
                             f"does the same)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="set config keys, typed and checked like the file's: policy.learn.batch_size=128 "
                             "env.stop_value=none (engine/overrides.py)")
    dist = parser.add_argument_group("data-parallel processes started by baton (no torchrun needed)")
    dist.add_argument("--gpus", default=None, metavar="all|N",
                      help="one process per GPU on this node: 'all' visible GPUs or the first N (sets policy.cuda)")
    dist.add_argument("--nproc", type=int, default=None, metavar="N", help="N processes on this node (CPU: gloo)")
    dist.add_argument("--nnodes", type=int, default=1, metavar="N", help="nodes in the job (default 1)")
    dist.add_argument("--node-rank", type=int, default=0, metavar="n", help="this node's index, 0 .. nnodes-1")
    dist.add_argument("--master-addr", default=None, help="node 0's address, the same on every node")
    dist.add_argument("--master-port", type=int, default=None, help="a free port on node 0, the same everywhere")
    dist.add_argument("--rendezvous", default=None, metavar="file:///PATH",
                      help="meet through a new file on a filesystem every node shares, instead of an address")
    # torch.distributed.launch appends --local-rank=N (--local_rank before torch 2.0); LOCAL_RANK in the
    # environment carries the same value, which is what the runtime reads.
    parser.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, default=None,
                        help=argparse.SUPPRESS)
    return parser


class _Debug(argparse.Action):
    """``--debug``: sets ``BATON_DEBUG=1`` as it is parsed, for this process and those it starts
    (``commands.user_errors``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, True)
        os.environ[DEBUG_ENV] = "1"


def resume_last(argv: Optional[Sequence[str]]) -> List[str]:
    """``argv`` with a bare ``--resume`` followed by a ``KEY=VALUE`` word moved to the end, where it takes no
    value: ``--resume`` takes an optional ``auto``, and argparse would otherwise take that word as its value
    and the overrides would lose their order (the last of two for one key must win)."""
    words = list(sys.argv[1:] if argv is None else argv)
    for i, word in enumerate(words[:-1]):
        following = words[i + 1]
        if word == "--resume" and "=" in following and not following.startswith("-"):
            return words[:i] + words[i + 1:] + ["--resume"]
    return words


def parse_train_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description="Train the pipeline of this config.")
    args, extras = add_train_options(parser).parse_known_args(resume_last(argv))
    take_overrides(args, extras, parser.error, parser)
    check_launch_options(args, parser.error)
    return args


def take_overrides(args: argparse.Namespace, extras: Sequence[str], error: Any,
                   parser: Optional[argparse.ArgumentParser] = None) -> None:
    """Add the ``KEY=VALUE`` words argparse left over to ``args.overrides``; any other leftover is an error,
    which names the option meant when one of ``parser``'s is close (``--nprocs``: did you mean ``--nproc``).

    argparse matches a ``nargs="*"`` positional once, so ``a=1 --seed 1 b=2`` leaves ``b=2`` unparsed; taking
    it here lets overrides and options mix in any order (torch.distributed.launch's ``--local-rank=N`` is an
    option like the others)."""
    if getattr(args, "resume", False) not in (True, False, "auto"):  # --resume takes a KEY=VALUE after it
        if "=" not in args.resume:
            error(f"--resume takes no value, or 'auto' (continue the run if there is one, else start it); got "
                  f"{args.resume!r}")
        extras, args.resume = [args.resume] + list(extras), True
    stray = [word for word in extras if word.startswith("-") or "=" not in word]
    if stray or (extras and not hasattr(args, "overrides")):
        error(f"unrecognized arguments: {' '.join(stray or extras)}{_option_hint(stray, parser)}")
    if extras:
        args.overrides = list(args.overrides) + list(extras)


def _option_hint(words: Sequence[str], parser: Optional[argparse.ArgumentParser]) -> str:
    """``"; did you mean --nproc?"`` for the first of ``words`` close to an option of ``parser`` (or of its
    commands), else ""."""
    if parser is None:
        return ""
    options, parsers = set(), [parser]
    while parsers:
        current = parsers.pop()
        for action in current._actions:  # argparse keeps no public list of a parser's options
            options.update(s for s in action.option_strings if s.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    for word in words:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], sorted(options), n=1, cutoff=0.75)
            if close:
                return f"; did you mean {close[0]}?"
    return ""


def check_launch_options(args: argparse.Namespace, error: Any) -> None:
    """Reject impossible process layouts before anything starts (``error`` prints and exits, argparse's way)."""
    if args.gpus is not None and args.nproc is not None:
        error("--gpus and --nproc both set the processes per node: give one of them")
    if args.gpus is not None:
        gpus = visible_gpu_count()
        if args.gpus != "all" and not (args.gpus.isdigit() and int(args.gpus) >= 1):
            error(f"--gpus {args.gpus!r}: give 'all' or a number of GPUs >= 1")
        if gpus == 0:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            error(f"--gpus {args.gpus}: no CUDA GPU is visible to this process"
                  f"{f' (CUDA_VISIBLE_DEVICES={visible!r})' if visible is not None else ''}; use --nproc N to "
                  f"train with N CPU processes")
        if args.gpus != "all" and int(args.gpus) > gpus:
            error(f"--gpus {args.gpus}: this node sees {gpus} GPU{'s' if gpus != 1 else ''}")
    if args.nproc is not None and args.nproc < 1:
        error(f"--nproc {args.nproc}: give at least 1 process")
    if args.nnodes < 1:
        error(f"--nnodes {args.nnodes}: give at least 1 node")
    if not 0 <= args.node_rank < args.nnodes:
        error(f"--node-rank {args.node_rank} is not in 0..{args.nnodes - 1} (--nnodes {args.nnodes})")
    if args.nnodes > 1 and args.rendezvous is None and (args.master_addr is None or args.master_port is None):
        error(f"--nnodes {args.nnodes} needs where the nodes meet: --master-addr HOST0 --master-port PORT (the same "
              f"on every node), or --rendezvous file:///shared/path")
    if args.rendezvous is not None:
        try:
            check_rendezvous(args.rendezvous)
        except ValueError as err:
            error(str(err))
    if _starts_processes(args) and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        error("--gpus/--nproc/--nnodes start their own processes, but this one was started by a launcher "
              "(WORLD_SIZE is set): leave them out under torchrun")
    if _starts_processes(args) and srun_task_count() > 1:
        error(f"--gpus/--nproc/--nnodes start their own processes, but this one is one of {srun_task_count()} tasks "
              f"of an srun step (SLURM_PROCID, SLURM_NTASKS), and each Slurm task is already one rank: leave them "
              f"out and ask Slurm for one task per GPU (srun --ntasks-per-node=N baton train ...), or, on one "
              f"node, run baton train --gpus all as a single task (srun --ntasks=1)")


def _starts_processes(args: argparse.Namespace) -> bool:
    return args.gpus is not None or args.nproc is not None or args.nnodes > 1


#: the packages whose INFO lines a run prints (a config run as a script logs as ``__main__``)
BATON_LOGGERS = ("engine", "data", "middleware", "policies", "pipelines", "commands", "dizoo", "__main__")


def configure_logging() -> None:
    """One output for every way a run starts (``baton train``, ``python CONFIG.py``, torchrun, the processes
    ``--nproc`` starts): baton's INFO lines (``log.print_freq``, resume, thread sizing) on stderr, tagged with
    the rank under DDP; other libraries' (an experiment tracker's, its database's, HTTP clients') from WARNING
    up only. A logging configuration the caller made stays as it is."""
    if logging.getLogger().handlers:
        return
    if logging.getLogger("torch").level == logging.NOTSET:  # what torch's import sets: an import cut short by a
        logging.getLogger("torch").setLevel(logging.WARNING)  # signal would let its exit hooks print INFO lines
    world = int(os.environ.get("WORLD_SIZE", "1"))
    tag = f"[rank {os.environ.get('RANK', '0')}/{world}] " if world > 1 else ""
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s %(levelname)s {tag}%(name)s: %(message)s")
    for name in BATON_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # MLflow gives its logger a handler of its own


def _preempt_signals(main_config: Any) -> Sequence[str]:
    """The config's ``preempt.signals`` as given (checked when the run is built), else the default ones."""
    section = main_config.get("preempt") if hasattr(main_config, "get") else None
    signals = section.get("signals", DEFAULT_SIGNALS) if hasattr(section, "get") else DEFAULT_SIGNALS
    return signals if isinstance(signals, (list, tuple)) else DEFAULT_SIGNALS


@contextlib.contextmanager
def signals_end_the_command(signals: Sequence[str] = DEFAULT_SIGNALS) -> Iterator[None]:
    """Around a command that trains: a preemption signal where no run's guard takes it ends the command with
    128 + its number (``engine.preemption.stop_signals``): before the run's first iteration (the config read,
    the envs and the process group made) with one line saying so, and later signals during the shutdown the
    first one started are ignored, so its exit code stands. A ``Preempted`` of the run itself (its line
    printed by then) exits with its code too."""
    with stop_signals(signals):
        try:
            yield
        except Preempted as err:
            if err.outside_run is not None:
                print(f"baton: stopped by {err.signal} " + (
                    f"{err.outside_run}, while it was being built: nothing was trained or written; the same "
                    f"command starts it again" if err.outside_run.startswith("before") else
                    f"{err.outside_run}, as it closed: its summary.json and checkpoints are written"),
                    file=sys.stderr, flush=True)
            raise SystemExit(err.exit_code) from None


def run_from_args(input_cfg: Tuple[Any, Any], args: argparse.Namespace) -> Optional[dict]:
    """Run the standard pipeline with the parsed options: in this process, or on the processes that
    ``--gpus/--nproc/--nnodes`` ask for. Returns the run summary (None in the process that only launched).

    A preemption signal (``preempt.signals``) exits with 128 + its number, wherever it comes: while the run is
    built (one line), during its iterations (the run's own stop: ``latest`` written, its line), or as it ends
    (a later signal during that shutdown changes nothing)."""
    configure_logging()
    with signals_end_the_command(_preempt_signals(input_cfg[0])):
        try:
            if not _starts_processes(args):
                return _train(input_cfg, args)
            _launch_ranks(input_cfg, args)
        except Preempted:  # SIGTERM & co (here, or on the ranks launched): latest written; 128 + the signal
            raise
        except KeyboardInterrupt:  # Ctrl-C: the run said where it stopped and its checkpoint; no traceback
            raise SystemExit(130) from None
        except RendezvousError as err:  # the ranks never met (here, or on the ranks launched): one line, status 1
            print_user_error(err)
            raise SystemExit(ENVIRONMENT_EXIT) from None
    return None


def _launch_ranks(input_cfg: Tuple[Any, Any], args: argparse.Namespace) -> None:
    main_config, create_config = input_cfg
    cuda = bool(main_config.get("policy", {}).get("cuda", False))
    if args.gpus is not None:
        nprocs = visible_gpu_count() if args.gpus == "all" else int(args.gpus)
        main_config = copy.deepcopy(main_config)
        main_config.setdefault("policy", {})["cuda"] = cuda = True
    else:
        nprocs = args.nproc or 1
    from .user_errors import reported_once  # torch: imported when training (baton --help loads none)

    backend = main_config.get("ddp", {}).get("backend", "auto")
    logger.info("starting %d process(es) on node %d of %d (%s)", nprocs, args.node_rank, args.nnodes,
                "GPUs" if cuda else "CPU")
    cores = usable_cores()
    if nprocs > cores:
        logger.warning("%d processes on %d usable CPU cores: each gets one torch thread and they take turns on "
                       "the cores, so the job runs slower than with --nproc %d (results are the same)", nprocs,
                       cores, cores)
    with reported_once():  # a rank's bad input: its one line, once for the job (commands.user_errors)
        preempt = main_config.get("preempt") or {}
        launch(_train, nprocs, args=((main_config, create_config), args), backend=backend, cuda=cuda,
               nnodes=args.nnodes, node_rank=args.node_rank, master_addr=args.master_addr,
               master_port=args.master_port, rendezvous=args.rendezvous,
               preempt_signals=preempt.get("signals", DEFAULT_SIGNALS), preempt_grace_s=preempt.get("grace_s", 20.0))


def _train(input_cfg: Tuple[Any, Any], args: argparse.Namespace) -> dict:
    """One process's run, and its one-line result (an application's output, not library logging)."""
    from pipelines.build import serial_pipeline  # torch: imported when training (baton --help loads none)
    from .user_errors import USER_ERRORS, exit_on_user_error

    configure_logging()  # a process --nproc started begins with no logging configuration
    if args.profile:
        input_cfg = _with_profile(input_cfg)
    try:
        with stop_signals(_preempt_signals(input_cfg[0])):  # a rank of --nproc's: its own scope (here, the command's)
            summary = serial_pipeline(input_cfg, seed=args.seed, max_env_step=args.max_env_step,
                                      max_train_iter=args.max_train_iter, exp_name=args.exp_name, resume=args.resume,
                                      force=args.force, progress=False if args.no_progress else None)
    except USER_ERRORS as err:  # a config, directory, checkpoint, dataset or full disk to fix: one line, status 2
        exit_on_user_error(err)
    except RunInterrupted as err:
        _report(err.summary)
        if err.summary.get("rank", 0) == 0 and err.summary.get("run_dir"):
            what = f"preempted by {err.signal}" if isinstance(err, RunPreempted) else "interrupted"
            print(f"baton: {what}; the latest checkpoint is in {os.path.join(err.summary['run_dir'], 'ckpt')}: "
                  f"the same command with --resume continues the run", file=sys.stderr, flush=True)
        raise
    _report(summary)
    return summary


def _report(summary: dict) -> None:
    """The run's final line (tagged with the rank under DDP), and rank 0's profile when it was asked for."""
    if not summary:
        return
    where = f"[rank {summary['rank']}/{summary['world_size']}] " if summary.get("world_size", 1) > 1 else ""
    line = (f"baton: {where}{summary['stop_reason']}: eval_return={_return(summary['eval_return'])} "
            f"best_eval_return={_return(summary['best_eval_return'])} env_step={summary['env_step']} "
            f"train_iter={summary['train_iter']} wall_time_s={summary['wall_time_s']:.2f} "
            f"elapsed_s={summary.get('elapsed_s', float('nan')):.2f} run_dir={summary['run_dir']}")
    # one write of the line and its newline: the ranks share the launcher's stdout, and print()'s two writes
    # (the text, then the newline, on an unbuffered stream) let another rank's line land between them
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if "profile" in summary and summary.get("rank", 0) == 0:
        print(f"baton: where the time went\n{profile_table(summary['profile'])}", flush=True)


def _return(value: Any) -> str:
    """An evaluation return in the final line: 6 significant digits, as ``baton tune`` prints them (the exact
    value is in summary.json); None where no evaluation ran.

    Examples:
        >>> _return(84.31800864483375), _return(500.0), _return(-0.000123456789), _return(None)
        ('84.318', '500', '-0.000123457', 'None')
    """
    return "None" if value is None else f"{value:.6g}"


def _with_profile(input_cfg: Tuple[Any, Any]) -> Tuple[Any, Any]:
    """``--profile``: the config with ``log.profile`` on (a copy; the caller's config is left alone)."""
    main_config = copy.deepcopy(dict(input_cfg[0]))
    main_config["log"] = dict(main_config.get("log") or {}, profile=True)
    return main_config, input_cfg[1]


def cli_main(input_cfg: Tuple[Any, Any], argv: Optional[List[str]] = None) -> Optional[dict]:
    """Entry point of a dizoo config file: ``if __name__ == "__main__": cli_main((main_config, create_config))``.

    Trailing ``KEY=VALUE`` words override config keys; a bad one ends the run before it starts, in one line."""
    args = parse_train_args(argv)
    if args.overrides:
        try:
            input_cfg = apply_overrides(input_cfg[0], input_cfg[1], args.overrides)
        except (ConfigError, UnknownTypeError) as err:
            print_user_error(err)
            raise SystemExit(2) from None
    return run_from_args(input_cfg, args)
