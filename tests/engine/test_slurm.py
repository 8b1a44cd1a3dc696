"""Slurm without glue: ``srun baton train`` forms the process group from Slurm's variables (engine/slurm.py).

The host-list parser and every check of the variables run as units; two ``baton train`` processes given the
variables srun gives its tasks train together, as 2 tasks of one node and as 2 nodes of one task each."""
from __future__ import annotations

import doctest
import json
import os
import re
import socket
import subprocess
import sys

import pytest

import engine.slurm
from engine.distributed import DDPContext, launched_world_size
from engine.slurm import (PORT_BASE, PORT_SPAN, SlurmEnvError, SlurmLayout, adopt_slurm_env, expand_hostlist,
                          expand_tasks_per_node, slurm_layout, srun_task_count)
from commands.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
               "TORCHELASTIC_RUN_ID")

# two tasks on each of two nodes, as srun --nodes=2 --ntasks-per-node=2 sets them (task 3: node 1, local 1)
TASK3 = dict(SLURM_PROCID="3", SLURM_NTASKS="4", SLURM_LOCALID="1", SLURM_NODEID="1", SLURM_NNODES="2",
             SLURM_NTASKS_PER_NODE="2", SLURM_TASKS_PER_NODE="2(x2)", SLURM_JOB_NODELIST="gpu-a[07-08]",
             SLURM_JOB_ID="123456")


def test_slurm_doctests_run():
    assert doctest.testmod(engine.slurm).failed == 0


@pytest.mark.parametrize("hostlist,hosts", [
    ("node01", ["node01"]),
    ("nodeA,nodeB", ["nodeA", "nodeB"]),
    ("node[01-04,07],gpu-a[1-2]", ["node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"]),
    ("n[008-011]", ["n008", "n009", "n010", "n011"]),           # zero padding kept across a carry
    ("n[9-11]", ["n9", "n10", "n11"]),                           # no padding: the widths grow
    ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
    ("a[1-2]b.example.org,c", ["a1b.example.org", "a2b.example.org", "c"]),
    ("x[3],y", ["x3", "y"]),
    (" node[1-2] ", ["node1", "node2"]),
])
def test_expand_hostlist_reads_slurm_syntax(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist,why", [
    ("node[01-04", r"'\[' that is never closed"),
    ("node01]", r"'\]' without its '\['"),
    ("node[[1-2]]", r"'\[' inside brackets"),
    ("node[a-c]", r"'a-c' is not a number or a range"),
    ("node[4-1]", "runs backwards"),
    ("node[]", r"'' is not a number"),
    ("node[1-]", r"'1-' is not a number"),
    ("a,,b", "an empty host name"),
    ("", "an empty host name"),
])
def test_expand_hostlist_names_what_is_wrong(hostlist, why):
    with pytest.raises(ValueError, match=rf"is not a Slurm host list: .*{why}"):
        expand_hostlist(hostlist)


def test_expand_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("4") == [4]
    with pytest.raises(ValueError, match="like 2"):
        expand_tasks_per_node("2x3")


def test_slurm_layout_of_a_task():
    layout = slurm_layout(TASK3)
    assert layout == SlurmLayout(rank=3, world_size=4, local_rank=1, local_world_size=2, node_rank=1, nnodes=2,
                                 master_addr="gpu-a07", master_port=PORT_BASE + 123456 % PORT_SPAN)
    assert layout.torchrun_env() == dict(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
                                         GROUP_RANK="1", MASTER_ADDR="gpu-a07", MASTER_PORT=str(layout.master_port))


def test_every_task_derives_the_same_port_in_a_safe_range():
    ports = {slurm_layout(dict(TASK3, SLURM_PROCID=str(r), SLURM_NODEID=str(r // 2), SLURM_LOCALID=str(r % 2)))
             .master_port for r in range(4)}
    assert len(ports) == 1
    for job in ("1", "16999", "17000", "99999999"):
        assert PORT_BASE <= slurm_layout(dict(TASK3, SLURM_JOB_ID=job)).master_port < 32768  # below ephemeral


def test_master_addr_and_port_set_by_hand_win():
    layout = slurm_layout(dict(TASK3, MASTER_ADDR="ib-gpu-a07", MASTER_PORT="29555", SLURM_JOB_NODELIST="bad["))
    assert (layout.master_addr, layout.master_port) == ("ib-gpu-a07", 29555)  # the node list is not read then


def test_step_variables_describe_the_step():
    """srun inside a larger allocation: the step's own variables (srun sets them) win over the job's."""
    env = dict(TASK3, SLURM_NTASKS="8", SLURM_NNODES="4", SLURM_NTASKS_PER_NODE="2", SLURM_TASKS_PER_NODE="2(x4)",
               SLURM_JOB_NODELIST="gpu-a[05-08]", SLURM_STEP_NUM_TASKS="4", SLURM_STEP_NUM_NODES="2",
               SLURM_STEP_TASKS_PER_NODE="2(x2)", SLURM_STEP_NODELIST="gpu-a[07-08]")
    layout = slurm_layout(env)
    assert (layout.world_size, layout.nnodes, layout.local_world_size, layout.master_addr) == (4, 2, 2, "gpu-a07")


def test_uneven_tasks_per_node():
    env = dict(TASK3, SLURM_NTASKS="5", SLURM_PROCID="4", SLURM_LOCALID="2", SLURM_NTASKS_PER_NODE="",
               SLURM_TASKS_PER_NODE="2,3")
    assert slurm_layout(env).local_world_size == 3


def test_first_host_of_a_huge_range_is_read_without_expanding_it():
    assert slurm_layout(dict(TASK3, SLURM_JOB_NODELIST="n[000000001-999999999]")).master_addr == "n000000001"


@pytest.mark.parametrize("env", [
    {},                                                         # no Slurm
    dict(TASK3, SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0"),   # one task: one process
    dict(TASK3, RANK="0", WORLD_SIZE="2"),                      # torchrun started in a batch script: it wins
    dict(TASK3, WORLD_SIZE="1"),
    {k: v for k, v in TASK3.items() if k != "SLURM_PROCID"},    # an allocation's shell, not a task
])
def test_no_layout_outside_an_srun_step_of_several_tasks(env):
    assert slurm_layout(env) is None
    assert srun_task_count(env) in (0, 1)


BAD = [
    ("rank not below tasks", dict(SLURM_PROCID="4"), r"SLURM_PROCID=4 is not below SLURM_NTASKS=4"),
    ("step rank not below step tasks", dict(SLURM_STEP_NUM_TASKS="2", SLURM_STEP_TASKS_PER_NODE="1(x2)"),
     r"SLURM_PROCID=3 is not below SLURM_STEP_NUM_TASKS=2"),
    ("local rank not below tasks on node", dict(SLURM_LOCALID="2"),
     r"SLURM_LOCALID=2 is not below the 2 tasks on this node \(SLURM_NODEID=1, SLURM_NTASKS_PER_NODE=2\)"),
    ("local rank, uneven nodes", dict(SLURM_NTASKS_PER_NODE="", SLURM_NTASKS="3", SLURM_PROCID="2",
                                      SLURM_TASKS_PER_NODE="2,1"),
     r"SLURM_LOCALID=1 is not below the 1 task on this node \(SLURM_NODEID=1, SLURM_TASKS_PER_NODE=2,1\)"),
    ("tasks do not divide over nodes", dict(SLURM_NTASKS="5", SLURM_TASKS_PER_NODE=""),
     r"SLURM_NTASKS=5 tasks do not divide over 2 nodes \(SLURM_NNODES\).*--ntasks-per-node=N"),
    ("tasks do not divide over job nodes", dict(SLURM_NTASKS="5", SLURM_NNODES="", SLURM_JOB_NUM_NODES="2",
                                                SLURM_TASKS_PER_NODE=""),
     r"do not divide over 2 nodes \(SLURM_JOB_NUM_NODES\)"),
    ("tasks per node times nodes", dict(SLURM_NTASKS="6", SLURM_TASKS_PER_NODE=""),
     r"SLURM_NTASKS=6 but SLURM_NTASKS_PER_NODE=2 on 2 nodes .*makes 4 tasks"),
    ("tasks per node list sum", dict(SLURM_NTASKS_PER_NODE="", SLURM_TASKS_PER_NODE="2,1"),
     r"SLURM_TASKS_PER_NODE=2,1 adds up to 3 tasks but SLURM_NTASKS=4"),
    ("tasks per node list length", dict(SLURM_NTASKS_PER_NODE="", SLURM_TASKS_PER_NODE="1(x4)"),
     r"SLURM_TASKS_PER_NODE=1\(x4\) lists 4 nodes but SLURM_NNODES=2"),
    ("tasks per node unreadable", dict(SLURM_NTASKS_PER_NODE="", SLURM_TASKS_PER_NODE="two"),
     r"SLURM_TASKS_PER_NODE: 'two' is not a list of tasks per node"),
    ("tasks on this node unknown", dict(SLURM_NTASKS_PER_NODE="", SLURM_TASKS_PER_NODE="", SLURM_NNODES=""),
     r"none of SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE, SLURM_TASKS_PER_NODE says"),
    ("node id not below nodes", dict(SLURM_NODEID="2"), r"SLURM_NODEID=2 is not below the node count 2"),
    ("unparsable node list", dict(SLURM_JOB_NODELIST="gpu-a[07-08"),
     r"SLURM_JOB_NODELIST: 'gpu-a\[07-08' is not a Slurm host list: .*never closed.*Set MASTER_ADDR"),
    ("no node list", dict(SLURM_JOB_NODELIST=""), r"none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST "
                                                  r"is set.*set MASTER_ADDR"),
    ("no job id", dict(SLURM_JOB_ID=""), r"SLURM_JOB_ID is not set.*set MASTER_PORT"),
    ("job id not a number", dict(SLURM_JOB_ID="12_3"), r"SLURM_JOB_ID is '12_3', not a number.*set MASTER_PORT"),
    ("bad master port", dict(MASTER_PORT="70000"), r"MASTER_PORT='70000' is not a port number"),
    ("rank not a number", dict(SLURM_PROCID="x"), r"SLURM_PROCID='x' is not a whole number"),
    ("tasks zero", dict(SLURM_NTASKS="0"), r"SLURM_NTASKS='0' is not a whole number >= 1"),
    ("local id missing", dict(SLURM_LOCALID=""), r"SLURM_LOCALID is not set, but SLURM_PROCID and SLURM_NTASKS are"),
    ("node id missing", dict(SLURM_NODEID=""), r"SLURM_NODEID is not set"),
    # issue 34: counts no job has, and host names no resolver takes, were accepted (then the ranks never met)
    ("tasks beyond any job", dict(SLURM_NTASKS="100000000000000000000"),
     r"SLURM_NTASKS=100000000000000000000 is more than any job holds \(at most 2,147,483,647"),
    ("tasks in float notation", dict(SLURM_NTASKS="1e20"), r"SLURM_NTASKS='1e20' is not a whole number >= 1"),
    ("a digit int() refuses", dict(SLURM_PROCID="\u00b2"), r"SLURM_PROCID='\u00b2' is not a whole number"),
    ("nodes repeated beyond any job", dict(SLURM_NTASKS_PER_NODE="", SLURM_TASKS_PER_NODE="2(x100000000000000000000)"),
     r"SLURM_TASKS_PER_NODE: '2\(x100000000000000000000\)' counts more nodes or tasks than any job holds"),
    ("non-ASCII node list", dict(SLURM_JOB_NODELIST="n\u0153ud[07-08]"),
     r"SLURM_JOB_NODELIST='n\u0153ud\[07-08\]' holds '\u0153' \(U\+0153\), which is not ASCII: host names are "
     r"ASCII.*Set MASTER_ADDR"),
    ("blank in node list", dict(SLURM_JOB_NODELIST="gpu a07"), r"holds ' ' \(U\+0020\), which is a blank"),
    ("non-ASCII master address", dict(MASTER_ADDR="n\u0153ud07"), r"MASTER_ADDR='n\u0153ud07' holds '\u0153'"),
]


@pytest.mark.parametrize("name,change,message", BAD, ids=[b[0] for b in BAD])
def test_slurm_variables_that_disagree_are_named(name, change, message):
    with pytest.raises(SlurmEnvError, match=message) as info:
        slurm_layout(dict(TASK3, **change))
    if "disagree" in str(info.value):
        assert "srun --ntasks-per-node=N baton train" in str(info.value)  # the fix


def test_adopt_slurm_env_sets_torchrun_variables():
    env = dict(TASK3)
    layout = adopt_slurm_env(env)
    assert {k: env[k] for k in layout.torchrun_env()} == layout.torchrun_env()
    assert adopt_slurm_env(env) is None  # torchrun's variables are set now: they win


@pytest.fixture
def clean_launch_env(monkeypatch):
    """No launcher or Slurm variables, and whatever a test's DDPContext exports removed afterwards."""
    for name in list(os.environ):
        if name.startswith("SLURM_") or name in LAUNCH_VARS:
            monkeypatch.delenv(name)
    for name in LAUNCH_VARS:  # set then deleted: monkeypatch restores them as absent
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(engine.slurm, "_adopted", None)
    return monkeypatch


def test_one_slurm_task_is_one_process(clean_launch_env):
    for name, value in dict(TASK3, SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0",
                            SLURM_NNODES="1", SLURM_NTASKS_PER_NODE="1", SLURM_TASKS_PER_NODE="1").items():
        clean_launch_env.setenv(name, value)
    with DDPContext() as ddp:
        assert (ddp.world_size, ddp.rank, ddp.slurm) == (1, 0, None)
    assert "RANK" not in os.environ and launched_world_size() == 1


def test_ddp_context_takes_the_ranks_from_slurm(clean_launch_env):
    for name, value in TASK3.items():
        clean_launch_env.setenv(name, value)
    assert launched_world_size() == 4
    ddp = DDPContext()
    assert (ddp.rank, ddp.world_size, ddp.local_rank) == (3, 4, 1)
    assert os.environ["LOCAL_WORLD_SIZE"] == "2" and os.environ["MASTER_ADDR"] == "gpu-a07"
    assert DDPContext().slurm == ddp.slurm  # a second pipeline in the process: the same layout
    assert DDPContext(rank=0, world_size=1).slurm is None


def test_a_task_bound_to_its_own_gpu_takes_the_first_it_sees(clean_launch_env):
    for name, value in dict(TASK3, SLURM_GPUS_PER_TASK="1").items():
        clean_launch_env.setenv(name, value)
    ddp = DDPContext()
    assert ddp.slurm.gpus_per_task
    assert ddp._device_slot(gpus=1) == (0, 1)   # bound: its one GPU is cuda:0, nccl allowed
    assert ddp._device_slot(gpus=2) == (1, 2)   # it sees the node's GPUs: cuda:LOCAL_RANK
    ddp.slurm = slurm_layout(dict(TASK3))
    assert ddp._device_slot(gpus=1) == (1, 2)   # not bound: two tasks share the GPU (gloo, or nccl's error)


@pytest.mark.parametrize("option", [["--nproc", "2"], ["--gpus", "all"], ["--gpus", "1"]])
def test_launch_options_inside_an_srun_step_are_refused(option, clean_launch_env, capsys):
    for name, value in TASK3.items():
        clean_launch_env.setenv(name, value)
    clean_launch_env.setattr("commands.options.visible_gpu_count", lambda: 2)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "-c", CONFIG, *option])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "one of 4 tasks of an srun step" in err and "each Slurm task is already one rank" in err
    assert "srun --ntasks-per-node=N baton train" in err


def test_launch_options_with_one_slurm_task_are_not_refused():
    assert srun_task_count(dict(TASK3, SLURM_NTASKS="1")) == 1
    assert srun_task_count(dict(TASK3, WORLD_SIZE="4")) == 0   # torchrun's ranks: its own refusal applies


# ---- the real thing: two `baton train` processes with the variables srun gives its tasks ----

def _port_in_derived_range() -> int:
    """A free port that SLURM_JOB_ID can select (PORT_BASE .. PORT_BASE + PORT_SPAN - 1)."""
    for port in range(PORT_BASE + os.getpid() % PORT_SPAN, PORT_BASE + PORT_SPAN):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in the derived range")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_tasks(tasks, cwds):
    """Start one `baton train` per task (its Slurm variables), wait for all (a hang fails, not blocks)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in LAUNCH_VARS}
    base.update(OMP_NUM_THREADS="1", BATON_DDP_TIMEOUT="60")
    cmd = [sys.executable, "-m", "commands", "train", "-c", CONFIG, "--exp-name", "run", "--max-env-step", "512",
           "--no-progress"]
    procs = [subprocess.Popen(cmd, cwd=cwd, env=dict(base, **task), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for task, cwd in zip(tasks, cwds)]
    try:
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for rank, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"task {rank}:\n{err[-3000:]}"
    return outputs


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_srun_two_tasks_on_one_node_train_as_one_job(tmp_path):
    port = _port_in_derived_range()
    job = dict(SLURM_NTASKS="2", SLURM_NNODES="1", SLURM_NTASKS_PER_NODE="2", SLURM_TASKS_PER_NODE="2",
               SLURM_JOB_NODELIST="localhost", SLURM_JOB_ID=str(port - PORT_BASE + 3 * PORT_SPAN))
    tasks = [dict(job, SLURM_PROCID=str(r), SLURM_LOCALID=str(r), SLURM_NODEID="0") for r in range(2)]
    outputs = _run_tasks(tasks, [tmp_path, tmp_path])
    for rank, (out, _) in enumerate(outputs):
        assert re.search(rf"\[rank {rank}/2\]", out), out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["rank"] == 0 and summary["env_step"] >= 512
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # one run directory, written by rank 0


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_srun_two_nodes_of_one_task_each_train_as_one_job(tmp_path):
    """Two "nodes" on this machine, each task in a directory of its own (a node's local disk): node 0's task
    writes the run, node 1's only its replay shard beside each checkpoint."""
    job = dict(SLURM_NTASKS="2", SLURM_NNODES="2", SLURM_NTASKS_PER_NODE="1", SLURM_TASKS_PER_NODE="1(x2)",
               SLURM_JOB_NODELIST="localhost,localhost", SLURM_JOB_ID="777", MASTER_PORT=str(_free_port()))
    tasks = [dict(job, SLURM_PROCID=str(n), SLURM_LOCALID="0", SLURM_NODEID=str(n)) for n in range(2)]
    nodes = [tmp_path / f"node{n}" for n in range(2)]
    for node in nodes:
        node.mkdir()
    _run_tasks(tasks, nodes)
    summary = json.loads((nodes[0] / "run" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["rank"] == 0
    written = sorted(os.path.relpath(os.path.join(d, f), nodes[1]) for d, _, fs in os.walk(nodes[1]) for f in fs)
    assert written and all(re.fullmatch(r"run/ckpt/\w+\.rank1\.pth\.tar", f) for f in written), written
