"""What ``--profile`` (``log.profile``) costs a real run: CartPole DQN with and without it.

Run: ``python bench/profile_overhead.py [--max-env-step N] [--repeats R]``. Each round trains the CartPole
DQN config (seed 0, stop value out of reach, so every run makes the same env steps and updates) once with
the profile and once without, in alternating order, in this one process after a warm-up run (torch's
lazy imports land there). The measure is ``summary.json``'s ``wall_time_s``, from the first iteration to
the end; the ratio is profiled / unprofiled, per round and of the medians. On a shared machine the wall
time varies by more than the profile can cost, so the process's CPU time over ``run()`` (less disturbed by
other processes) is reported beside it.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from typing import Any, Dict, List, Tuple

from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
from engine.profile import profile_table
from pipelines import build_pipeline


def train_s(profile: bool, max_env_step: int, exp_name: str) -> Tuple[float, float, Any]:
    """One run's training wall time, the CPU time of its ``run()``, and its summary."""
    cfg = copy.deepcopy(main_config)
    cfg.env.stop_value = 1e9
    cfg.log = dict(progress=False, profile=profile)
    pipeline = build_pipeline((cfg, create_config), seed=0, max_env_step=max_env_step, exp_name=exp_name)
    cpu = time.process_time()
    summary = pipeline.run()
    return summary["wall_time_s"], time.process_time() - cpu, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-env-step", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    times: Dict[bool, List[float]] = {False: [], True: []}
    cpu: Dict[bool, List[float]] = {False: [], True: []}
    profiled: Any = None
    with tempfile.TemporaryDirectory() as workdir:
        train_s(False, 1_000, os.path.join(workdir, "warmup"))
        for i in range(args.repeats):
            order = (False, True) if i % 2 == 0 else (True, False)  # neither always runs on a warmer machine
            for profile in order:
                seconds, cpu_s, summary = train_s(profile, args.max_env_step,
                                                  os.path.join(workdir, f"r{i}_{profile}"))
                times[profile].append(seconds)
                cpu[profile].append(cpu_s)
                profiled = summary if profile else profiled
    for i in range(args.repeats):
        print(f"round {i}: wall without {times[False][i]:.2f} s, with --profile {times[True][i]:.2f} s "
              f"(ratio {times[True][i] / times[False][i]:.3f}); CPU {cpu[False][i]:.2f} s / {cpu[True][i]:.2f} s "
              f"(ratio {cpu[True][i] / cpu[False][i]:.3f})")
    for name, values in (("wall", times), ("CPU", cpu)):
        off, on = statistics.median(values[False]), statistics.median(values[True])
        print(f"median {name}: without {off:.2f} s, with {on:.2f} s, ratio {on / off:.3f}")
    print(f"({profiled['env_step']} env steps, {profiled['train_iter']} updates, "
          f"{profiled['profile']['iterations']} iterations per run)")
    print(f"the last profiled run:\n{profile_table(profiled['profile'])}")


if __name__ == "__main__":
    main()
