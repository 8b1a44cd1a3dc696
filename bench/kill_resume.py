"""Kill -9 at random times, then resume: no finished checkpoint may be lost or corrupt, and every resume
must continue from the newest one.

Run: ``python bench/kill_resume.py [--trials 20] [--seed 0]``. Each trial starts CartPole DQN (stop value out
of reach, ``latest`` every 0.5 s and a periodic checkpoint every 40 updates, so kills land during writes
too), sends SIGKILL after a random 2-7 s, then checks:

1. every checkpoint file left in ``ckpt/`` loads (``weights_only=True``) with finite weights;
2. ``--resume`` starts from the newest of them (its logged ``env_step`` equals the newest checkpoint's) and
   runs on.
"""
from __future__ import annotations

import argparse
import glob
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from middleware.checkpoint import load_checkpoint, non_finite_tensors  # noqa: E402

CONFIG = """import runpy
ns = runpy.run_path({config!r}, run_name="config")
main_config, create_config = ns["main_config"], ns["create_config"]
main_config.env.stop_value = 1e9
main_config.ckpt = dict(latest_every_s=0.5, save_freq=40)
if __name__ == "__main__":
    from commands import cli_main
    cli_main((main_config, create_config))
"""


def trial(workdir: str, config: str, delay: float) -> dict:
    exp = os.path.join(workdir, "exp")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    train = [sys.executable, "-m", "commands", "train", "-c", config, "--exp-name", exp, "--no-progress"]
    proc = subprocess.Popen(train, cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    files = sorted(glob.glob(os.path.join(exp, "ckpt", "*.pth.tar")))
    newest_step, corrupt = -1, []
    for path in files:
        try:
            state = load_checkpoint(path)
            if non_finite_tensors(state["policy"]):
                corrupt.append(os.path.basename(path))
            newest_step = max(newest_step, state["ctx"]["env_step"])
        except Exception as err:  # a finished checkpoint that does not load: the failure this bench hunts
            corrupt.append(f"{os.path.basename(path)} ({err})")
    if not files:
        return {"files": 0, "corrupt": corrupt, "resumed": None, "newest": None}
    resumed = subprocess.run(train + ["--resume", "--max-env-step", str(newest_step + 256)], cwd=workdir, env=env,
                             capture_output=True, text=True, timeout=300)
    match = re.search(r"resumed from \S+ at env_step=(\d+)", resumed.stderr)
    return {"files": len(files), "corrupt": corrupt, "newest": newest_step, "rc": resumed.returncode,
            "resumed": int(match.group(1)) if match else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.py")
        with open(config, "w") as f:
            f.write(CONFIG.format(config=os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config",
                                                      "cartpole_dqn_config.py")))
        for t in range(args.trials):
            workdir = os.path.join(tmp, f"t{t}")
            os.makedirs(workdir)
            delay = rng.uniform(2.0, 7.0)
            r = trial(workdir, config, delay)
            results.append(r)
            ok = not r["corrupt"] and (r["files"] == 0 or (r["rc"] == 0 and r["resumed"] == r["newest"]))
            print(f"trial {t:2d}: killed after {delay:.1f} s; {r['files']} checkpoint files, corrupt: "
                  f"{r['corrupt'] or 'none'}; newest env_step {r['newest']}, resumed at {r['resumed']}: "
                  f"{'ok' if ok else 'FAILED'}", flush=True)
    failed = [r for r in results if r["corrupt"] or (r["files"] and (r["rc"] != 0 or r["resumed"] != r["newest"]))]
    print(f"{len(results)} trials, {sum(1 for r in results if r['files'])} with checkpoints, {len(failed)} failed")


if __name__ == "__main__":
    main()
