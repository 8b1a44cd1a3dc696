"""The cost of the collective guard and the progress records (issue 13): the CartPole DQN DDP config on 2
gloo processes under torchrun, at a fixed budget, with ``BATON_DDP_GUARD=0`` and ``=1`` alternately.

Run: ``python bench/ddp_guard.py [--budget 20000] [--rounds 3]``. Reports the training wall time of each
run (``summary.json``'s ``wall_time_s``, the same number of iterations in both) and the guard's share.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from ddp_cartpole import CONFIG, UNSOLVABLE, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=int, default=20000, help="global env steps per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times = {"0": [], "1": []}
    with tempfile.TemporaryDirectory() as tmp:
        unsolvable = os.path.join(tmp, "unsolvable_config.py")
        with open(unsolvable, "w") as f:
            f.write(UNSOLVABLE.format(config=CONFIG))
        for r in range(args.rounds):
            for guard in ("0", "1"):  # interleaved: both see the same machine state
                os.environ["BATON_DDP_GUARD"] = guard
                s = run(2, os.path.join(tmp, f"g{guard}_{r}"), 0, ["--max-env-step", str(args.budget)],
                        config=unsolvable)
                times[guard].append(s["wall_time_s"])
                print(f"round {r} guard={guard}: {s['wall_time_s']:.2f} s, {s['train_iter']} updates, "
                      f"ddp collectives {s['ddp_collective_s']:.2f} s")
    off, on = statistics.median(times["0"]), statistics.median(times["1"])
    print(f"median wall time: guard off {off:.2f} s, on {on:.2f} s: the guard costs {100 * (on - off) / off:+.1f}%")


if __name__ == "__main__":
    main()
