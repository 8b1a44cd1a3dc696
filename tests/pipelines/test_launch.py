"""baton starts the data-parallel processes itself: all processes of a node, and many nodes simulated on
this machine (each node a `baton train` process with its own working directory)."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from commands.cli import main

pytestmark = pytest.mark.timeout(240)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_config.py")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_node(node_rank, nnodes, nproc, meet, cwd):
    cmd = [sys.executable, "-m", "commands", "train", "-c", CONFIG, "--nproc", str(nproc), "--nnodes", str(nnodes),
           "--node-rank", str(node_rank), "--max-env-step", "256", "--no-progress", "--exp-name", "run", *meet]
    env = dict(os.environ, OMP_NUM_THREADS="1", BATON_DDP_TIMEOUT="60")
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.distributed
@pytest.mark.parametrize("meeting,nproc", [("address", 2), ("file", 1)])
def test_two_nodes_get_deterministic_global_ranks_and_only_node0_writes(nproc, meeting, tmp_path):
    meet = (["--master-addr", "127.0.0.1", "--master-port", str(_free_port())] if meeting == "address"
            else ["--rendezvous", f"file://{tmp_path}/rendezvous"])
    nodes = [tmp_path / f"node{n}" for n in range(2)]
    for node in nodes:
        node.mkdir()
    procs = [_start_node(n, 2, nproc, meet, nodes[n]) for n in range(2)]
    outputs = [p.communicate(timeout=200) for p in procs]
    for n, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"node {n}:\n{err[-3000:]}"
        ranks = sorted(int(r) for r, _ in re.findall(r"\[rank (\d+)/(\d+)\]", out))
        assert ranks == [n * nproc + local for local in range(nproc)], out   # global = node_rank * nproc + local
        assert set(re.findall(r"\[rank \d+/(\d+)\]", out)) == {str(2 * nproc)}
    summary = json.loads((nodes[0] / "run" / "summary.json").read_text())
    assert summary["world_size"] == 2 * nproc and summary["rank"] == 0
    # global rank 0 alone writes the model, checkpoints and logs; node 1's ranks only their replay shard and
    # RNG state beside each checkpoint (what a resume on any number of ranks reads)
    written = sorted(os.path.relpath(os.path.join(d, f), nodes[1]) for d, _, fs in os.walk(nodes[1]) for f in fs)
    node1_ranks = "|".join(str(r) for r in range(nproc, 2 * nproc))
    assert written and all(re.fullmatch(rf"run/ckpt/\w+\.rank({node1_ranks})\.pth\.tar", f) for f in written), written
    assert {f"run/ckpt/latest.rank{r}.pth.tar" for r in range(nproc, 2 * nproc)} <= set(written)


@pytest.mark.parametrize("argv,message", [
    (["--nnodes", "2", "--node-rank", "2", "--rendezvous", "file:///tmp/x"], r"--node-rank 2 is not in 0\.\.1"),
    (["--nnodes", "2", "--node-rank", "1"], "needs where the nodes meet: --master-addr"),
    (["--rendezvous", "file:///no/such/dir/job"], "the directory /no/such/dir does not exist"),
    (["--rendezvous", "/shared/job"], "file:///shared/path"),
    (["--gpus", "all", "--nproc", "2"], "give one of them"),
    (["--nproc", "0"], "at least 1 process"),
    (["--gpus", "two"], "give 'all' or a number"),
])
def test_impossible_layouts_are_refused_before_anything_starts(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "-c", CONFIG, *argv])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_gpus_all_without_a_gpu_says_to_use_nproc(capsys, monkeypatch):
    monkeypatch.setattr("commands.options.visible_gpu_count", lambda: 0)
    with pytest.raises(SystemExit):
        main(["train", "-c", CONFIG, "--gpus", "all"])
    err = capsys.readouterr().err
    assert "no CUDA GPU is visible" in err and "use --nproc N" in err


def test_more_processes_than_cores_is_said_before_they_start(monkeypatch, caplog):
    launched = []
    monkeypatch.setattr("commands.options.usable_cores", lambda: 2)
    monkeypatch.setattr("commands.options.launch", lambda *a, **k: launched.append(a[1]))
    with caplog.at_level("WARNING", logger="commands.options"):
        main(["train", "-c", CONFIG, "--nproc", "8"])
    assert launched == [8]
    assert "8 processes on 2 usable CPU cores" in caplog.text and "--nproc 2" in caplog.text
    caplog.clear()
    main(["train", "-c", CONFIG, "--nproc", "2"])
    assert "usable CPU cores" not in caplog.text


def test_launch_options_under_an_external_launcher_are_refused(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit):
        main(["train", "-c", CONFIG, "--nproc", "2"])
    assert "leave them out under torchrun" in capsys.readouterr().err


def test_rendezvous_directory_must_be_writable(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("engine.launcher.os.access", lambda path, mode: False)  # as for a read-only mount
    with pytest.raises(SystemExit):
        main(["train", "-c", CONFIG, "--rendezvous", f"file://{tmp_path}/job"])
    assert f"the directory {tmp_path} is not writable" in capsys.readouterr().err


@pytest.mark.distributed
def test_nodes_started_with_different_nproc_fail_naming_the_world_sizes(tmp_path):
    """Node 0 started for 2 processes per node, node 1 for 1: every process fails at the meeting, naming the
    world sizes seen (4 and 2), instead of a bare timeout."""
    meet = ["--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
    env = dict(os.environ, OMP_NUM_THREADS="1", BATON_DDP_TIMEOUT="10")
    procs = {}
    for n, nproc in ((1, 1), (0, 2)):  # node 1 first: its world size is in the store before node 0 gives up
        node = tmp_path / f"node{n}"
        node.mkdir()
        cmd = [sys.executable, "-m", "commands", "train", "-c", CONFIG, "--nproc", str(nproc), "--nnodes", "2",
               "--node-rank", str(n), "--max-env-step", "256", "--no-progress", *meet]
        procs[n] = subprocess.Popen(cmd, cwd=node, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errors = {n: p.communicate(timeout=120)[1] for n, p in procs.items()}
    for n, proc in procs.items():
        assert proc.returncode != 0
        assert "started for different world sizes (2, 4)" in errors[n], errors[n][-3000:]


@pytest.mark.timeout(120)
def test_a_node_whose_peers_never_come_ends_with_one_line(tmp_path):
    """Issue 34: node 0 of 2 started alone (--nnodes 2, its peer never comes): after the timeout, the rank's
    RendezvousError was a traceback inside the launcher's (torch's ProcessRaisedException). Now its one line,
    exit status 1 (the job's environment failed, not its input)."""
    cmd = [sys.executable, "-m", "commands", "train", "-c", CONFIG, "--nproc", "1", "--nnodes", "2", "--node-rank", "0",
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), "--max-env-step", "64", "--no-progress"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=100,
                          env=dict(os.environ, OMP_NUM_THREADS="1", BATON_DDP_TIMEOUT="3"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if " INFO " not in line]
    assert lines == ["baton: rank 0 of 2: only 1 of 2 processes arrived within 3 s. Check that every node was "
                     "started, with the same --nnodes and --nproc, meeting at the same address or file"], proc.stderr
