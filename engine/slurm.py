"""Slurm without glue: the ranks of an ``srun`` step, read from Slurm's variables.

``srun baton train -c CFG`` (one task per GPU, any number of nodes) starts every rank itself; each task
finds its place in Slurm's variables, and ``engine.distributed.DDPContext`` turns them into torchrun's
(``slurm_layout``, ``adopt_slurm_env``), so the rest of the run sees what it sees under torchrun:

- rank ``SLURM_PROCID`` of ``SLURM_NTASKS`` (``SLURM_STEP_NUM_TASKS`` where srun set it: the step's own);
- local rank ``SLURM_LOCALID`` of the tasks on its node (``SLURM_STEP_TASKS_PER_NODE``,
  ``SLURM_NTASKS_PER_NODE`` or ``SLURM_TASKS_PER_NODE``, at ``SLURM_NODEID``), on ``cuda:LOCAL_RANK``; when
  Slurm bound each task to its own GPUs (``--gpus-per-task``), the task's first GPU, ``cuda:0``;
- the master address ``MASTER_ADDR`` if set, else the first host of the step's node list
  (``SLURM_STEP_NODELIST``, ``SLURM_JOB_NODELIST`` or ``SLURM_NODELIST``, in Slurm's compressed syntax:
  ``expand_hostlist``); rank 0 runs there under Slurm's block and cyclic distributions;
- the master port ``MASTER_PORT`` if set, else ``15000 + SLURM_JOB_ID % 17000``: every task of the job
  computes the same one, below the range Linux hands out to outgoing connections (32768 and up).

Only a step of several tasks is a data-parallel job: a single task (``SLURM_NTASKS=1``) is one process, as
without Slurm. torchrun's variables win: with ``RANK`` or ``WORLD_SIZE`` set (torchrun started inside a
batch script) Slurm's are not read. Variables that disagree (a rank not below the task count, a local rank
not below the tasks on its node, tasks that do not divide over the nodes, a node list that is not a host
list) or that no job can have (a count beyond what Slurm and torch number, 2**31 - 1; a host name that is not
ASCII) raise ``SlurmEnvError`` naming them and the fix.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, MutableMapping, Optional, Sequence, Tuple

__all__ = ["SlurmEnvError", "SlurmLayout", "expand_hostlist", "expand_tasks_per_node", "slurm_layout",
           "adopt_slurm_env", "srun_task_count", "PORT_BASE", "PORT_SPAN", "MAX_COUNT"]

PORT_BASE, PORT_SPAN = 15000, 17000  # ports 15000..31999: below Linux's ephemeral range (32768..60999)

_TORCHRUN = ("RANK", "WORLD_SIZE")
_NTASKS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
_NNODES = ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
_NODELIST = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_FIX = ("Start the ranks as the tasks of one srun step (one task per GPU: srun --ntasks-per-node=N baton train "
        "...), and leave SLURM_* variables as Slurm set them")
#: the largest count or index a Slurm variable may hold here: torch numbers ranks with a C int (Slurm with 32 bits)
MAX_COUNT = 2**31 - 1


class SlurmEnvError(ValueError):
    """Slurm's variables of this process disagree, or cannot be read; the message names them and the fix."""


class _HostListSyntax(ValueError):
    pass


def _split_top_level(text: str) -> List[str]:
    """``text`` cut at the commas outside brackets; brackets checked (closed, not nested)."""
    items, start, depth = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            if depth:
                raise _HostListSyntax(f"a '[' inside brackets at character {i}")
            depth = 1
        elif char == "]":
            if not depth:
                raise _HostListSyntax(f"a ']' without its '[' at character {i}")
            depth = 0
        elif char == "," and not depth:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise _HostListSyntax("a '[' that is never closed")
    items.append(text[start:])
    return items


def _numbers(group: str) -> List[Tuple[int, int, int]]:
    """The ranges of one bracket group: ``"01-04,07"`` -> ``[(1, 4, 2), (7, 7, 2)]`` (low, high, width)."""
    ranges = []
    for part in group.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if match is None:
            raise _HostListSyntax(f"[{group}]: {part!r} is not a number or a range like 01-04")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise _HostListSyntax(f"[{group}]: the range {part} runs backwards")
        ranges.append((int(low), int(high), len(low)))  # zero-padded to the width of the lower bound
    return ranges


def _parse_hostlist(text: str) -> List[List[object]]:
    """Each host expression as its pieces: literal strings and bracket groups (lists of ranges)."""
    expressions = []
    for item in _split_top_level(text.strip()):
        item = item.strip()
        if not item:
            raise _HostListSyntax("an empty host name (two commas in a row, or one at an end)")
        pieces: List[object] = []
        for i, piece in enumerate(re.split(r"\[([^\[\]]*)\]", item)):
            pieces.append(_numbers(piece) if i % 2 else piece)
        expressions.append(pieces)
    return expressions


def _names(pieces: Sequence[object]) -> Iterator[str]:
    """The names of one host expression, lazily (a range is never held in memory whole); with several
    bracket groups every combination, the leftmost group varying slowest."""
    if not pieces:
        yield ""
        return
    head = pieces[0]
    starts = [head] if isinstance(head, str) else (
        str(n).zfill(width) for low, high, width in head for n in range(low, high + 1))
    for start in starts:
        for tail in _names(pieces[1:]):
            yield start + tail


def _hosts(expressions: Sequence[List[object]]) -> Iterator[str]:
    for pieces in expressions:
        yield from _names(pieces)


def expand_hostlist(hostlist: str) -> List[str]:
    """The host names of a Slurm host list, in order (what ``scontrol show hostnames`` prints).

    Ranges keep the zero padding of their lower bound; a name may hold several bracket groups.

    Raises:
        ValueError: the text is not a host list, saying where.

    Examples:
        >>> expand_hostlist("node[01-03,07],gpu-a[1-2]")
        ['node01', 'node02', 'node03', 'node07', 'gpu-a1', 'gpu-a2']
        >>> expand_hostlist("rack[1-2]-node[01-02]")
        ['rack1-node01', 'rack1-node02', 'rack2-node01', 'rack2-node02']
        >>> expand_hostlist("nodeA,nodeB")
        ['nodeA', 'nodeB']
    """
    try:
        return list(_hosts(_parse_hostlist(hostlist)))
    except _HostListSyntax as err:
        raise ValueError(f"{hostlist!r} is not a Slurm host list: {err}") from None


def _first_host(hostlist: str) -> str:
    """The first host of a host list, checked whole but not expanded (``node[0001-9999]`` is one name)."""
    try:
        return next(_hosts(_parse_hostlist(hostlist)))
    except _HostListSyntax as err:
        raise ValueError(f"{hostlist!r} is not a Slurm host list: {err}") from None


def expand_tasks_per_node(text: str) -> List[int]:
    """Slurm's tasks per node, one number a node: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``.

    Raises:
        ValueError: the text is not in that form.

    Examples:
        >>> expand_tasks_per_node("2(x3),1")
        [2, 2, 2, 1]
    """
    return [count for count, nodes in _tasks_per_node_runs(text) for _ in range(nodes)]


def _tasks_per_node_runs(text: str) -> List[Tuple[int, int]]:
    """``(tasks, nodes)`` for each part of Slurm's tasks per node, unexpanded: ``"2(x3),1"`` -> ``[(2, 3), (1, 1)]``
    (a repeat count is never turned into that many list items before it is checked).

    Raises:
        ValueError: the text is not in that form, or it counts more nodes or tasks than ``MAX_COUNT``.
    """
    runs = []
    for part in text.strip().split(","):
        match = re.fullmatch(r"([0-9]+)(?:\(x([0-9]+)\))?", part.strip())
        if match is None:
            raise ValueError(f"{text!r} is not a list of tasks per node like 2(x3),1")
        runs.append((int(match.group(1)), int(match.group(2) or 1)))
    if sum(nodes for _, nodes in runs) > MAX_COUNT or sum(count * nodes for count, nodes in runs) > MAX_COUNT:
        raise ValueError(f"{text!r} counts more nodes or tasks than any job holds (at most {MAX_COUNT:,})")
    return runs


def _tasks_on_node(runs: Sequence[Tuple[int, int]], node: int) -> int:
    for count, nodes in runs:
        if node < nodes:
            return count
        node -= nodes
    raise IndexError(node)


@dataclass(frozen=True)
class SlurmLayout:
    """Where this task stands in its srun step, and where the ranks meet."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int
    #: Slurm gave each task GPUs of its own (``--gpus-per-task``): a task bound to them sees them from cuda:0
    gpus_per_task: bool = False

    def torchrun_env(self) -> Dict[str, str]:
        """The variables torchrun would have set for this rank."""
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size), "LOCAL_RANK": str(self.local_rank),
                "LOCAL_WORLD_SIZE": str(self.local_world_size), "GROUP_RANK": str(self.node_rank),
                "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}


def _read(env: Mapping[str, str], names: Sequence[str]) -> Tuple[Optional[str], Optional[str]]:
    """The first of ``names`` that is set: ``(name, value)``, else ``(None, None)``."""
    for name in names:
        if env.get(name, "").strip():
            return name, env[name].strip()
    return None, None


def _whole(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes '²', which ``int`` refuses, and other scripts' digits)."""
    return re.fullmatch(r"[0-9]+", text) is not None


def _count(env: Mapping[str, str], names: Sequence[str], minimum: int = 0) -> Tuple[Optional[str], Optional[int]]:
    name, text = _read(env, names)
    if name is None:
        return None, None
    if not _whole(text) or int(text) < minimum:
        raise SlurmEnvError(f"{name}={text!r} is not a whole number{f' >= {minimum}' if minimum else ''}. {_FIX}")
    if int(text) > MAX_COUNT:
        raise SlurmEnvError(f"{name}={text} is more than any job holds (at most {MAX_COUNT:,}: torch numbers its "
                            f"ranks with 32 bits, as Slurm does its tasks). {_FIX}")
    return name, int(text)


def _required(env: Mapping[str, str], name: str, why: str) -> int:
    found, value = _count(env, (name,))
    if found is None:
        raise SlurmEnvError(f"{name} is not set, but SLURM_PROCID and SLURM_NTASKS are: {why}. {_FIX}")
    return value


def srun_task_count(environ: Optional[Mapping[str, str]] = None) -> int:
    """The tasks of the srun step this process is one of; 0 outside one, or when torchrun's variables are
    set (they win). Nothing is checked: ``slurm_layout`` does that."""
    env = os.environ if environ is None else environ
    if any(name in env for name in _TORCHRUN) or "SLURM_PROCID" not in env:
        return 0
    _, text = _read(env, _NTASKS)
    return int(text) if text is not None and _whole(text) else 0


def _tasks_on_nodes(env: Mapping[str, str], ntasks_var: str, ntasks: int
                    ) -> Tuple[Optional[int], Optional[int], Optional[List[Tuple[int, int]]], str]:
    """``(nodes, uniform tasks per node, tasks on each node as (tasks, nodes) runs, what said so)``, each None
    where unknown."""
    nnodes_var, nnodes = _count(env, _NNODES, minimum=1)
    counts: Optional[List[Tuple[int, int]]] = None
    uniform: Optional[int] = None
    source = ""
    name, text = _read(env, ("SLURM_STEP_TASKS_PER_NODE",))
    if name is None and _read(env, ("SLURM_NTASKS_PER_NODE",))[0] is not None:
        name, uniform = _count(env, ("SLURM_NTASKS_PER_NODE",), minimum=1)
        source = f"{name}={uniform}"
    elif name is None:
        name, text = _read(env, ("SLURM_TASKS_PER_NODE",))
    if text is not None:
        try:
            counts = _tasks_per_node_runs(text)
        except ValueError as err:
            raise SlurmEnvError(f"{name}: {err}. {_FIX}") from None
        source = f"{name}={text}"
        listed, total = sum(n for _, n in counts), sum(c * n for c, n in counts)
        if nnodes is not None and listed != nnodes:
            raise SlurmEnvError(f"{source} lists {listed} node{'s' if listed != 1 else ''} but "
                                f"{nnodes_var}={nnodes}: the Slurm variables of this process disagree. {_FIX}")
        if total != ntasks:
            raise SlurmEnvError(f"{source} adds up to {total} tasks but {ntasks_var}={ntasks}: the Slurm "
                                f"variables of this process disagree. {_FIX}")
        nnodes = listed if nnodes is None else nnodes
        uniform = counts[0][0] if len({c for c, _ in counts}) == 1 else None
    if uniform is not None and nnodes is not None:
        nodes = f"{nnodes} node{'s' if nnodes != 1 else ''}" + (f" ({nnodes_var})" if nnodes_var else "")
        if ntasks % nnodes:
            raise SlurmEnvError(f"{ntasks_var}={ntasks} tasks do not divide over {nodes} ({source} asks for the "
                                f"same number on every node). Ask for --nodes=M and --ntasks-per-node=N (and no "
                                f"--ntasks), or an --ntasks divisible by the node count")
        if ntasks != uniform * nnodes:
            raise SlurmEnvError(f"{ntasks_var}={ntasks} but {source} on {nodes} makes {uniform * nnodes} tasks: "
                                f"the Slurm variables of this process disagree. Ask for --nodes=M and "
                                f"--ntasks-per-node=N (and no --ntasks). {_FIX}")
    return nnodes, uniform, counts, source


def slurm_layout(environ: Optional[Mapping[str, str]] = None) -> Optional[SlurmLayout]:
    """This process's place in its srun step, or None when it is not one of several Slurm tasks (or
    torchrun's ``RANK``/``WORLD_SIZE`` are set, which win).

    Raises:
        SlurmEnvError: variables that disagree or cannot be read, naming them and the fix.

    Examples:
        >>> env = dict(SLURM_PROCID="3", SLURM_NTASKS="4", SLURM_LOCALID="1", SLURM_NODEID="1",
        ...            SLURM_NNODES="2", SLURM_NTASKS_PER_NODE="2", SLURM_JOB_NODELIST="gpu[07-08]",
        ...            SLURM_JOB_ID="4242")
        >>> layout = slurm_layout(env)
        >>> layout.rank, layout.world_size, layout.local_rank, layout.master_addr, layout.master_port
        (3, 4, 1, 'gpu07', 19242)
        >>> slurm_layout(dict(env, SLURM_NTASKS="1", SLURM_PROCID="0")) is None   # one task: one process
        True
    """
    env = os.environ if environ is None else environ
    if any(name in env for name in _TORCHRUN) or "SLURM_PROCID" not in env:
        return None
    ntasks_var, ntasks = _count(env, _NTASKS, minimum=1)
    if ntasks is None or ntasks <= 1:
        return None
    rank = _required(env, "SLURM_PROCID", "this task's rank")
    if rank >= ntasks:
        raise SlurmEnvError(f"SLURM_PROCID={rank} is not below {ntasks_var}={ntasks} (ranks are 0..{ntasks - 1}): "
                            f"the Slurm variables of this process disagree. {_FIX}")
    local_rank = _required(env, "SLURM_LOCALID", "this task's index on its node, which picks its GPU")
    node_rank = _required(env, "SLURM_NODEID", "this task's node")
    nnodes, uniform, counts, source = _tasks_on_nodes(env, ntasks_var, ntasks)
    if nnodes is not None and node_rank >= nnodes:
        raise SlurmEnvError(f"SLURM_NODEID={node_rank} is not below the node count {nnodes}: the Slurm variables "
                            f"of this process disagree. {_FIX}")
    if counts is not None:
        local_world = _tasks_on_node(counts, node_rank)
    elif uniform is not None:
        local_world = uniform
    elif nnodes is not None and ntasks % nnodes == 0:
        local_world, source = ntasks // nnodes, f"{ntasks_var}={ntasks} over {nnodes} nodes"
    else:
        raise SlurmEnvError(f"{ntasks_var}={ntasks}, but none of SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE, "
                            f"SLURM_TASKS_PER_NODE says how many tasks run on this node (srun sets them). {_FIX}")
    if local_rank >= local_world:
        raise SlurmEnvError(f"SLURM_LOCALID={local_rank} is not below the {local_world} task"
                            f"{'s' if local_world != 1 else ''} on this node (SLURM_NODEID={node_rank}, {source}): "
                            f"the Slurm variables of this process disagree. {_FIX}")
    return SlurmLayout(rank=rank, world_size=ntasks, local_rank=local_rank, local_world_size=local_world,
                       node_rank=node_rank, nnodes=nnodes if nnodes is not None else 1,
                       master_addr=_master_addr(env), master_port=_master_port(env),
                       gpus_per_task=env.get("SLURM_GPUS_PER_TASK", "0").strip() not in ("", "0"))


_SET_MASTER = ("Set MASTER_ADDR to the host of rank 0 (the first node of the job: scontrol show hostnames \"${}\" | "
               "head -n 1)")


def _not_a_host(name: str, text: str) -> Optional[str]:
    """Why ``text`` (variable ``name``) holds no host name: a character that is not ASCII, or a blank or control
    character; None when it may be one. (A name the resolver does not know shows when the ranks meet.)"""
    bad = next((char for char in text if not char.isascii() or not char.isprintable() or char.isspace()), None)
    if bad is None:
        return None
    what = "is not ASCII" if not bad.isascii() else "is a blank or control character"
    return (f"{name}={text!r} holds {bad!r} (U+{ord(bad):04X}), which {what}: host names are ASCII letters, digits, "
            f"'-' and '.' (an internationalised name in its xn-- form)")


def _master_addr(env: Mapping[str, str]) -> str:
    if env.get("MASTER_ADDR", "").strip():
        address = env["MASTER_ADDR"].strip()
        why = _not_a_host("MASTER_ADDR", address)
        if why is not None:
            raise SlurmEnvError(f"{why}. Set MASTER_ADDR to the host name or address of rank 0's node")
        return address
    name, hostlist = _read(env, _NODELIST)
    if name is None:
        raise SlurmEnvError(f"none of {', '.join(_NODELIST)} is set, so the node of rank 0 is unknown: set "
                            f"MASTER_ADDR to its host name")
    why = _not_a_host(name, hostlist)
    if why is not None:
        raise SlurmEnvError(f"{why}. {_SET_MASTER.format(name)}")
    try:
        return _first_host(hostlist)
    except ValueError as err:
        raise SlurmEnvError(f"{name}: {err}. {_SET_MASTER.format(name)}") from None


def _master_port(env: Mapping[str, str]) -> int:
    text = env.get("MASTER_PORT", "").strip()
    if text:
        if not _whole(text) or not 0 < int(text) < 65536:
            raise SlurmEnvError(f"MASTER_PORT={text!r} is not a port number (1..65535)")
        return int(text)
    name, job = _read(env, ("SLURM_JOB_ID", "SLURM_JOBID"))
    if name is None or not _whole(job):
        raise SlurmEnvError(f"SLURM_JOB_ID is {'not set' if name is None else f'{job!r}, not a number'}, so the "
                            f"tasks cannot agree on a port by themselves: set MASTER_PORT to a port free on the "
                            f"first node, the same for every task")
    return PORT_BASE + int(job) % PORT_SPAN


_adopted: Optional[SlurmLayout] = None


def adopt_slurm_env(environ: Optional[MutableMapping[str, str]] = None) -> Optional[SlurmLayout]:
    """Set torchrun's variables from Slurm's (``slurm_layout``) in ``environ`` (the process's environment by
    default), so whatever reads ``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` ... sees the
    srun step as it would see torchrun's ranks. Returns the layout; in the process's environment also the
    layout adopted earlier, while the variables still say it (a second pipeline in the same process).

    Raises:
        SlurmEnvError: as ``slurm_layout``.
    """
    global _adopted
    own = environ is None
    env = os.environ if environ is None else environ
    layout = slurm_layout(env)
    if layout is None:
        if own and _adopted is not None and all(env.get(k) == v for k, v in _adopted.torchrun_env().items()):
            return _adopted
        return None
    env.update(layout.torchrun_env())
    if own:
        _adopted = layout
    return layout
