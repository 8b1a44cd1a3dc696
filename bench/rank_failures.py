"""How long a 2-process job takes to end when one rank is killed, raises or hangs, with the DEFAULT
collective timeout, and whether the error names the rank at fault (issue 13's targets: every process
exits non-zero in < 60 s, a hang in < 120 s).

The job is CartPole DQN's DDP config in the standard pipeline, with one stage added that makes rank 1 fail
in iteration 40 (after writing the time it did). Launched the two ways users launch: baton's launcher
(``engine.launch``, as ``baton train --nproc 2`` does) and ``torchrun --nproc_per_node=2``.

    python bench/rank_failures.py [--kinds kill raise hang] [--launchers baton torchrun]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent('''
    import os, signal, sys, time
    from dizoo.classic_control.cartpole.config.cartpole_dqn_ddp_config import main_config, create_config
    from engine import launch
    from engine.distributed import get_rank
    from pipelines import build_pipeline

    KIND, OUT = sys.argv[1], sys.argv[2]

    def fault(ctx):
        if get_rank() == 1 and ctx.total_step == 40:
            with open(os.path.join(OUT, "fault_time"), "w") as f:
                f.write(repr(time.time()))
            if KIND == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if KIND == "raise":
                raise RuntimeError("rank 1 raised on purpose")
            time.sleep(3600)

    def train():
        main_config.env.stop_value = 1e9
        pipeline = build_pipeline((main_config, create_config), exp_name=os.path.join(OUT, f"run{get_rank()}"),
                                  progress=False)
        pipeline.insert_after("learner", fault, name="fault")
        pipeline.run()

    if __name__ == "__main__":
        if len(sys.argv) > 3 and sys.argv[3] == "baton":
            launch(train, 2)
        else:
            train()
''')


def trial(kind: str, launcher: str) -> dict:
    with tempfile.TemporaryDirectory() as out:
        script = os.path.join(out, "job.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        env = {k: v for k, v in os.environ.items() if k != "BATON_DDP_TIMEOUT"}  # the default timeout
        env.update(PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
        cmd = ([sys.executable, script, kind, out, "baton"] if launcher == "baton" else
               [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script, kind, out])
        proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=600)
        end = time.time()
        fault = float(open(os.path.join(out, "fault_time")).read())
        text = proc.stdout + proc.stderr
        return {"kind": kind, "launcher": launcher, "exit": proc.returncode, "seconds": end - fault,
                "names_rank_1": _names_rank_1(kind, launcher, text), "output": text}


def _names_rank_1(kind: str, launcher: str, text: str) -> bool:
    """Whether the job's output blames rank 1: baton's own words, or torchrun's "Root Cause" section."""
    if kind == "hang":
        return "At fault: rank 1" in text
    if launcher == "baton":
        return {"kill": "rank 1 of 2 was killed", "raise": "rank 1 of 2 failed first"}[kind] in text
    cause = text.split("Root Cause", 1)[-1]
    return "rank      : 1 " in cause and (kind != "raise" or "rank 1 raised on purpose" in text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=["kill", "raise", "hang"])
    parser.add_argument("--launchers", nargs="+", default=["baton", "torchrun"])
    parser.add_argument("--show", action="store_true", help="print each job's last 3,000 characters of output")
    args = parser.parse_args()
    print("| failure | launcher | exit code | seconds from the fault to the job's end | error names rank 1 |")
    print("|---|---|---|---|---|")
    for kind in args.kinds:
        for launcher in args.launchers:
            r = trial(kind, launcher)
            print(f"| {r['kind']} | {r['launcher']} | {r['exit']} | {r['seconds']:.1f} | {r['names_rank_1']} |",
                  flush=True)
            if args.show:
                print(r["output"][-3000:], flush=True)


if __name__ == "__main__":
    main()
