"""baton side by side with Stable-Baselines3: the same task, seeds and env-step budget in one run.

Run: ``python bench/peers.py [--tasks cartpole-dqn,pendulum-sac] [--seeds 0,1,2] [--json OUT]``
(needs the ``bench`` extra: ``pip install -c constraints.txt -e ".[bench]"``, Stable-Baselines3).
``--baton-set KEY=VALUE`` (repeatable) adds an override to baton's side (``policy.amp=bf16``); ``--sides baton``
runs one side only, for more seeds of a peer whose runs repeat exactly (SB3 on one CPU thread does).

For each task and seed, SB3 and then baton train on the task's env for its budget, alternating (SB3 seed 0,
baton seed 0, SB3 seed 1, ...), each in a fresh subprocess with one torch thread (``OMP_NUM_THREADS=1``),
``--jobs`` at a time (default 1). With ``--jobs 2`` a seed's two sides run together, each on its own core under
the same load; more start the next seeds and tasks as cores free up, in the same order. Each run is printed as
it ends, each task's table after its last run, and ``--json`` is rewritten after every run (a command stopped
early keeps what finished). Per task it prints, for each framework, the mean over seeds and
each seed's value of:

- final return: the mean return of the last evaluation (within one evaluation interval of the budget);
- best return: the highest evaluation of the run;
- env steps/s and updates/s: env steps and gradient updates over the training wall time;
- wall s: training time, from the first env step to the end, **evaluations included for both**; the
  build (envs, networks) is not in it, interpreter start-up and imports neither: ``proc s`` is the whole
  subprocess;
- to peer's final: the training wall time at which an evaluation first reaches the other framework's mean
  final return ("never" where no evaluation does), the mean over the seeds that reach it;
- the final returns' interquartile mean with its 95% stratified-bootstrap interval (``baton report``'s
  estimate, ``commands.iqm``);
- to the task's threshold (CartPole 475 and LunarLander 200, gymnasium's ``reward_threshold``; Pendulum -250,
  Tianshou's): the wall time and env steps of the first evaluation at or above it, per seed.

The two sides
-------------
SB3: rl-baselines3-zoo's hyperparameters for the task (``bench/peers_sb3.py``, which names the zoo file,
key and commit of each); baton: its dizoo config for the task (the path is printed), or where there is none
``baton train --algo ALGO --env ENV`` from defaults. baton runs as a user does, ``python CONFIG --seed S
--max-env-step N`` with ``env.stop_value=none`` (the whole budget, no early stop), and its ``progress.csv``
(env_step, wall_time_s, eval/episode_return_mean) and ``summary.json`` are read back.

Evaluation, the same protocol for both: ``--eval-episodes`` (10) greedy episodes, split evenly over a
separate vector env of baton's ``env.evaluator_env_num`` envs, every ``--eval-every`` env steps (default:
the budget / 25). SB3 evaluates at each multiple of it (an ``EvalCallback``-like callback). baton's
``policy.eval.evaluator.eval_freq`` counts train iterations, not env steps: it is set to whole loop
iterations, ``k`` iterations of ``E`` env steps and ``U`` updates each (``E``: ``n_sample`` rounded up to
whole vector steps; ``U``: ``update_per_collect`` off-policy, epochs x minibatches on-policy), ``k`` the
nearest to ``--eval-every / E``: eval_freq ``k*U`` updates, every ``k*E`` env steps (printed). baton also
evaluates once after its first update.

Tasks (name: env, baton algo, budget): cartpole-dqn CartPole-v1 50k, cartpole-ppo CartPole-v1 100k,
pendulum-sac Pendulum-v1 20k, lunarlander-dqn LunarLander-v3 100k, lunarlander-ppo LunarLander-v3 1M, and hopper-sac, hopper-td3,
halfcheetah-sac, halfcheetah-td3 on MuJoCo's v5 tasks at 100k (the size of a 2-core machine);
doorkey-ppo: MiniGrid-DoorKey-5x5-v0 at 400k, PPO (SB3 on the zoo's FlatObsWrapper and settings);
fetchreach-sac-her: FetchReach-v4 at 20k, SAC with hindsight replay at rl-baselines3-zoo's her.yml settings;
bitflip-dqn-her: the HER paper's 15-bit flipping at 150k, DQN with hindsight replay on both sides (SB3's
``HerReplayBuffer``; ``dizoo/goal/envs.py``);
cartpole_masked-ppo_lstm: CartPole-v1 with its velocities hidden (``dizoo``'s ``VelocityMasked`` wrapper on both
sides; rl-baselines3-zoo's CartPoleNoVel-v1) at 100k, recurrent PPO against SB3-contrib's RecurrentPPO (the
``bench`` extra installs it), with the wall time and env steps to 475 (CartPole-v1's threshold) per seed;
taxi-ppo-masked: Taxi-v4 at 300k with its legal-action mask against sb3-contrib's MaskablePPO (both on PPO's
defaults, no zoo entry: ``dizoo/toy_text``), each action checked against the mask on both sides
(``env.action_mask_check``), and taxi-ppo-unmasked: the same without it (baton ``env.action_mask_key=``, SB3's PPO),
with the wall time and env steps to 8 (gymnasium's threshold) per seed. A task whose
baton algorithm or env cannot be built (not registered, an extra not installed) is skipped with one line.
The full 1M-step MuJoCo runs (the published tables' budget)::

    python bench/peers.py --tasks hopper-sac,hopper-td3,halfcheetah-sac,halfcheetah-td3 --budget 1000000

``--budget N`` sets every task's budget, ``--budget-scale X`` multiplies each task's own.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, TypeVar

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # baton's packages, when this file runs as a script
from commands.iqm import iqm_with_ci  # noqa: E402  (numpy only: no torch in the parent)

SB3_WORKER = os.path.join(ROOT, "bench", "peers_sb3.py")
RETURN_COLUMN = "eval/episode_return_mean"
T = TypeVar("T")


class Task(NamedTuple):
    env_id: str
    algo: str                  # baton's algorithm name
    budget: int                # env steps
    config: Optional[str]      # baton's dizoo config, relative to the repository; None or absent: --algo/--env
    wrapper: Optional[str] = None  # "module:Class" around env_id for SB3 (baton's config names the env type)
    solve_at: Optional[float] = None  # the score that solves the task: the time and env steps to it are reported
    overrides: Tuple[str, ...] = ()  # baton's KEY=VALUE words after its config (a variant of the config's task)


TASKS: Dict[str, Task] = {
    # solve_at: the env's threshold (gymnasium's reward_threshold; Pendulum: Tianshou's, as the dizoo env type)
    "cartpole-dqn": Task("CartPole-v1", "dqn", 50_000, "dizoo/classic_control/cartpole/config/cartpole_dqn_config.py",
                         solve_at=475.0),
    "cartpole-ppo": Task("CartPole-v1", "ppo", 100_000, "dizoo/classic_control/cartpole/config/cartpole_ppo_config.py",
                         solve_at=475.0),
    "pendulum-sac": Task("Pendulum-v1", "sac", 20_000, "dizoo/classic_control/pendulum/config/pendulum_sac_config.py",
                         solve_at=-250.0),
    "lunarlander-dqn": Task("LunarLander-v3", "dqn", 100_000,
                            "dizoo/box2d/lunarlander/config/lunarlander_dqn_config.py", solve_at=200.0),
    "lunarlander-ppo": Task("LunarLander-v3", "ppo", 1_000_000,
                            "dizoo/box2d/lunarlander/config/lunarlander_ppo_config.py", solve_at=200.0),
    "hopper-sac": Task("Hopper-v5", "sac", 100_000, "dizoo/mujoco/config/hopper_sac_config.py"),
    "hopper-td3": Task("Hopper-v5", "td3", 100_000, "dizoo/mujoco/config/hopper_td3_config.py"),
    "halfcheetah-sac": Task("HalfCheetah-v5", "sac", 100_000, "dizoo/mujoco/config/halfcheetah_sac_config.py"),
    # baton's HalfCheetah TD3 config keeps CleanRL's settings (LeanRL's, the GPU bench's anchor): here it runs the
    # zoo's, which SB3 runs (hopper_td3_config.py's: 10,000 random steps, rates of 1e-3, 400x300)
    "halfcheetah-td3": Task("HalfCheetah-v5", "td3", 100_000, "dizoo/mujoco/config/halfcheetah_td3_config.py",
                            overrides=("policy.random_collect_size=10000", "policy.learn.learning_rate_q=1e-3",
                                       "policy.learn.learning_rate_policy=1e-3",
                                       "policy.model.actor_head_hidden_size_list=[400,300]",
                                       "policy.model.critic_head_hidden_size_list=[400,300]")),
    # the HER paper's 15-bit flipping (dizoo/goal/envs.py), DQN with hindsight replay on both sides; SB3 makes the
    # env from gymnasium's "module:id"
    "bitflip-dqn-her": Task("dizoo.goal.envs:BitFlipping-v0", "dqn", 150_000,
                            "dizoo/goal/config/bit_flipping_dqn_her_config.py", solve_at=-7.5),
    # gymnasium-robotics' FetchReach (the robotics extra): SAC with hindsight replay, rl-baselines3-zoo's settings on
    # both sides (baton's config: dizoo/robotics)
    "fetchreach-sac-her": Task("gymnasium_robotics:FetchReach-v4", "sac", 20_000,
                               "dizoo/robotics/config/fetch_reach_sac_her_config.py", solve_at=-5.0),
    # MiniGrid's DoorKey-5x5 (the minigrid extra): baton's dict of image and direction against the zoo's
    # FlatObsWrapper (SB3's MultiInputPolicy takes no 7x7 image: its CNN needs 36x36)
    "doorkey-ppo": Task("minigrid:MiniGrid-DoorKey-5x5-v0", "ppo", 400_000,
                        "dizoo/minigrid/config/doorkey_ppo_config.py", wrapper="minigrid.wrappers:FlatObsWrapper",
                        solve_at=0.9),
    # CartPole with its velocities hidden: baton's env type cartpole_masked, the same wrapper around SB3's envs
    "cartpole_masked-ppo_lstm": Task("CartPole-v1", "ppo_lstm", 100_000,
                                     "dizoo/classic_control/cartpole/config/cartpole_masked_ppo_lstm_config.py",
                                     wrapper="dizoo.classic_control.cartpole.envs:VelocityMasked", solve_at=475.0),
    # Taxi-v4 with its legal-action mask (info["action_mask"]) against sb3-contrib's MaskablePPO, every action checked
    # against the mask on both sides (a finished run took no illegal one); and both without it (baton's mask off,
    # SB3's PPO): what the mask is worth
    "taxi-ppo-masked": Task("Taxi-v4", "ppo", 300_000, "dizoo/toy_text/config/taxi_ppo_config.py", solve_at=8.0,
                            overrides=("env.action_mask_check=True",)),
    "taxi-ppo-unmasked": Task("Taxi-v4", "ppo", 300_000, "dizoo/toy_text/config/taxi_ppo_config.py", solve_at=8.0,
                              overrides=("env.action_mask_key=",)),
}
EVALS_PER_RUN = 25  # the default --eval-every is the budget divided by this


class TaskSkipped(Exception):
    """A task baton (or the env) cannot run here; the message says why, in one line."""


class Evaluation(NamedTuple):
    env_step: int
    wall_time_s: float
    mean: float


class BatonSetup(NamedTuple):
    source: str            # what is printed: the config's path, or the --algo/--env command
    argv: List[str]        # the command, before the per-run options
    eval_freq: int         # policy.eval.evaluator.eval_freq (train iterations)
    eval_env_steps: int    # env steps between evaluations that eval_freq makes
    evaluator_env_num: int


# ---- the pure parts (tests/bench/test_peers.py) ----------------------------------------------------
def baton_curve(progress_csv: str) -> List[Evaluation]:
    """The evaluations of a baton run's ``progress.csv``, in ``env_step`` order (a background evaluation's
    row is written a few rows after its weights' step)."""
    from middleware.progress_csv import read_progress

    columns = read_progress(progress_csv)
    if RETURN_COLUMN not in columns:
        return []
    rows = zip(columns["env_step"], columns["wall_time_s"], columns[RETURN_COLUMN])
    return sorted(Evaluation(int(step), float(wall), float(mean)) for step, wall, mean in rows if not math.isnan(mean))


def time_to_score(curve: Sequence[Evaluation], score: float) -> Optional[float]:
    """The wall time of the first evaluation whose mean reaches ``score``; None when none does."""
    reached = [e.wall_time_s for e in curve if e.mean >= score]
    return min(reached) if reached else None


def eval_schedule(cfg: Mapping[str, Any], on_policy: bool, eval_every: int) -> Tuple[int, int]:
    """``(eval_freq, env steps between evaluations)``: baton's ``eval_freq`` (train iterations) that
    evaluates every whole loop iteration nearest to ``eval_every`` env steps (the module docstring)."""
    envs = int(cfg["env"]["collector_env_num"])
    iter_env_steps = math.ceil(int(cfg["policy"]["collect"]["n_sample"]) / envs) * envs
    learn = cfg["policy"]["learn"]
    if on_policy:
        iter_updates = int(learn["epoch_per_collect"]) * math.ceil(iter_env_steps / int(learn["batch_size"]))
    else:
        iter_updates = int(learn["update_per_collect"])
    iterations = max(1, round(eval_every / iter_env_steps))
    return iterations * iter_updates, iterations * iter_env_steps


def resolve_baton(task: Task, eval_every: int, root: str = ROOT, extra: Sequence[str] = ()) -> BatonSetup:
    """How baton runs ``task``: its dizoo config when the file exists, else ``baton train --algo --env``; its
    evaluation schedule from the config with the task's overrides and ``extra`` (``--baton-set``) applied, so that
    a typo in them fails here, before any run.

    Raises:
        TaskSkipped: the algorithm or env type is not registered, or the env cannot be made (its extra).
    """
    import gymnasium as gym

    from engine.config import ConfigError, compile_config
    from engine.registry import POLICY_REGISTRY, UnknownTypeError
    from commands.algo_env import AlgoEnvError, build_config
    from commands.config_file import load_config_file
    from engine.overrides import apply_overrides

    config = os.path.join(root, task.config) if task.config else None
    try:
        if config is not None and os.path.isfile(config):
            main_config, create_config = load_config_file(config)
            source, argv = os.path.relpath(config, root), [sys.executable, config]
        else:
            main_config, create_config = build_config(task.algo, task.env_id)
            source = f"baton train --algo {task.algo} --env {task.env_id} (defaults: no dizoo config)"
            argv = [sys.executable, "-m", "commands", "train", "--algo", task.algo, "--env", task.env_id]
        try:
            main_config, create_config = apply_overrides(main_config, create_config, [*task.overrides, *extra])
        except ConfigError as err:  # a typo of the command line's: the whole command stops, naming it
            raise SystemExit(f"{task.algo} on {task.env_id}: {' '.join(extra)}: {err}") from err
        cfg = compile_config(main_config, create_config, save=False)
        on_policy = POLICY_REGISTRY.get(cfg.policy.type).pipeline == "on_policy"
        gym.make(task.env_id).close()
    except (AlgoEnvError, UnknownTypeError, ConfigError, ValueError, ImportError, gym.error.Error) as err:
        raise TaskSkipped(f"baton cannot run {task.algo} on {task.env_id} here: {err}") from err
    eval_freq, eval_env_steps = eval_schedule(cfg, on_policy, eval_every)
    return BatonSetup(source, argv, eval_freq, eval_env_steps, int(cfg.env.evaluator_env_num))


def summarise(runs: Sequence[Mapping[str, Any]], peer_final: Optional[float],
              solve_at: Optional[float] = None) -> Dict[str, Any]:
    """One framework's numbers over its seeds; ``peer_final`` is the other framework's mean final return;
    ``solve_at``: the task's solving score, whose first wall time and env step per seed are added."""
    curves = [[Evaluation(*e) for e in run["curve"]] for run in runs]
    finals = [c[-1].mean if c else None for c in curves]
    bests = [max(e.mean for e in c) if c else None for c in curves]
    to_peer = [None if peer_final is None else time_to_score(c, peer_final) for c in curves]
    reached = [t for t in to_peer if t is not None]
    known = [f for f in finals if f is not None]
    interval = iqm_with_ci(known, seed=0) if known else None  # baton report's estimate, the same draws
    return dict(
        final=_mean(finals), finals=finals,
        final_iqm=None if interval is None else float(interval.iqm),
        final_ci=None if interval is None else [float(interval.low), float(interval.high)], best=_mean(bests), bests=bests,
        env_steps_per_s=statistics.mean(r["env_step"] / r["wall_time_s"] for r in runs),
        updates_per_s=statistics.mean(r["train_iter"] / r["wall_time_s"] for r in runs),
        wall_time_s=statistics.mean(r["wall_time_s"] for r in runs),
        process_s=statistics.mean(r["process_s"] for r in runs),
        to_peer_final_s=statistics.mean(reached) if reached else None, to_peer_final_each_s=to_peer,
        seeds_reaching_peer_final=len(reached),
        **({} if solve_at is None else dict(
            solve_at=solve_at, to_solve_each_s=[time_to_score(c, solve_at) for c in curves],
            to_solve_each_env_steps=[next((e.env_step for e in c if e.mean >= solve_at), None) for c in curves])))


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.mean(known) if known else None


# ---- running ---------------------------------------------------------------------------------------
def _child_env() -> Dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _run(cmd: List[str], workdir: str, what: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=workdir, env=_child_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def run_sb3(name: str, task: Task, seed: int, budget: int, eval_every: int, eval_episodes: int, eval_envs: int,
            workdir: str) -> Dict[str, Any]:
    out = os.path.join(workdir, f"sb3_{name}_seed{seed}.json")
    process = _run([sys.executable, SB3_WORKER, "--task", name, "--env", task.env_id, "--seed", str(seed),
                    "--budget", str(budget), "--eval-every", str(eval_every), "--eval-episodes", str(eval_episodes),
                    "--eval-envs", str(eval_envs), "--out", out]
                   + (["--wrapper", task.wrapper] if task.wrapper else []), workdir, f"SB3 {name} seed {seed}")
    with open(out) as f:
        return dict(json.load(f), process_s=process)


def run_baton(name: str, setup: BatonSetup, seed: int, budget: int, eval_episodes: int,
              workdir: str, overrides: Sequence[str] = ()) -> Dict[str, Any]:
    exp = os.path.join(workdir, f"baton_{name}_seed{seed}")
    process = _run(setup.argv + ["--seed", str(seed), "--max-env-step", str(budget), "--exp-name", exp,
                                 "--no-progress", "env.stop_value=none", f"env.n_evaluator_episode={eval_episodes}",
                                 f"policy.eval.evaluator.eval_freq={setup.eval_freq}", *overrides],
                   workdir, f"baton {name} seed {seed}")
    with open(os.path.join(exp, "summary.json")) as f:
        summary = json.load(f)
    curve = baton_curve(os.path.join(exp, "progress.csv"))
    return dict(framework="baton", task=name, seed=seed, env_step=summary["env_step"], train_iter=summary["train_iter"],
                wall_time_s=summary["wall_time_s"], process_s=process, run_dir=exp, curve=[list(e) for e in curve])


# ---- printing --------------------------------------------------------------------------------------
def _score(value: Optional[float]) -> str:
    return "none" if value is None else f"{value:.1f}"


def _seconds(value: Optional[float]) -> str:
    return "never" if value is None else f"{value:.1f}"


def format_rows(summaries: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """The table of one task: a header and one row per framework."""
    lines = [f"  {'':<6} {'final return (per seed)':<34} {'best return (per seed)':<34} {'env st/s':>9} "
             f"{'upd/s':>7} {'wall s':>7} {'proc s':>7}  wall s to peer's final (per seed)"]
    for framework, s in summaries.items():
        final = f"{_score(s['final'])} ({' '.join(_score(v) for v in s['finals'])})"
        best = f"{_score(s['best'])} ({' '.join(_score(v) for v in s['bests'])})"
        each = s["to_peer_final_each_s"]
        reaching = s["seeds_reaching_peer_final"]
        partial = f" [{reaching}/{len(each)} seeds]" if 0 < reaching < len(each) else ""
        to_peer = (f"{_seconds(s['to_peer_final_s'])}{partial} ({' '.join(_seconds(t) for t in each)})"
                   if s.get("peer_ran", True) else "no peer in this run")
        lines.append(f"  {framework:<6} {final:<34} {best:<34} {s['env_steps_per_s']:>9.0f} {s['updates_per_s']:>7.0f} "
                     f"{s['wall_time_s']:>7.1f} {s['process_s']:>7.1f}  {to_peer}")
    for framework, s in summaries.items():
        if s.get("final_iqm") is not None:
            low, high = s["final_ci"]
            lines.append(f"  {framework:<6} final return IQM {s['final_iqm']:.1f}, 95% bootstrap CI [{low:.1f}, "
                         f"{high:.1f}] ({len([f for f in s['finals'] if f is not None])} seeds; baton report's)")
    for framework, s in summaries.items():
        if s.get("solve_at") is not None:
            seconds, steps = s["to_solve_each_s"], s["to_solve_each_env_steps"]
            solved = [t for t in seconds if t is not None]
            lines.append(f"  {framework:<6} to {s['solve_at']:g}: {len(solved)}/{len(seconds)} seeds, wall s "
                         f"{_seconds(statistics.mean(solved) if solved else None)} "
                         f"({' '.join(_seconds(t) for t in seconds)}), env steps "
                         f"({' '.join('never' if n is None else str(n) for n in steps)})")
    return lines


def _task_list(text: str) -> List[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in TASKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown task {', '.join(unknown) or '(none given)'}; choose from "
                                         f"{', '.join(TASKS)}")
    return names


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number of runs at once, at least 1, got {text!r}")
    return int(text)


def _seed_list(text: str) -> List[int]:
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes integers separated by commas (0,1,2), got {text!r}") from None


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=_task_list, default=list(TASKS), help=f"comma-separated, of {', '.join(TASKS)}")
    parser.add_argument("--seeds", type=_seed_list, default=[0, 1, 2], help="comma-separated (default 0,1,2)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=int, default=None, help="env steps of every task (default: each task's)")
    budget.add_argument("--budget-scale", type=float, default=1.0, help="multiply each task's budget")
    parser.add_argument("--eval-every", type=int, default=None, help=f"env steps between evaluations (default: "
                                                                      f"the budget / {EVALS_PER_RUN})")
    parser.add_argument("--eval-episodes", type=int, default=10, help="greedy episodes per evaluation (default 10)")
    parser.add_argument("--json", metavar="OUT", help="write every run (curves included) and the summaries here")
    parser.add_argument("--jobs", type=_positive, default=1, help="runs at once, each on one core (default 1; 2: "
                                                                "a seed's two sides together)")
    parser.add_argument("--keep", metavar="DIR", help="keep the runs under DIR instead of a temporary directory")
    parser.add_argument("--baton-set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override of baton's side after the task's own, repeatable (e.g. policy.amp=bf16)")
    parser.add_argument("--sides", choices=("both", "baton", "sb3"), default="both",
                        help="run both frameworks (default), or one (its finals then have no peer's to compare)")
    args = parser.parse_args(argv)
    sides = ("sb3", "baton") if args.sides == "both" else (args.sides,)
    from peers_sb3 import ZOO  # bench/ is on sys.path when this file runs; imports no SB3

    results: Dict[str, Any] = dict(seeds=args.seeds, eval_episodes=args.eval_episodes, tasks={}, skipped={})
    with tempfile.TemporaryDirectory() as tmp:
        workdir = os.path.abspath(args.keep) if args.keep else tmp
        os.makedirs(workdir, exist_ok=True)
        work: List[Callable[[], Dict[str, Any]]] = []
        labels: List[Tuple[str, str, int]] = []  # (task, framework, seed) of each entry of work
        for name in args.tasks:
            task = TASKS[name]
            steps = args.budget if args.budget is not None else int(task.budget * args.budget_scale)
            eval_every = args.eval_every or max(1, steps // EVALS_PER_RUN)
            try:
                setup = resolve_baton(task, eval_every, extra=args.baton_set)
            except TaskSkipped as err:
                print(f"{name}: skipped: {err}", flush=True)
                results["skipped"][name] = str(err)
                continue
            zoo = ZOO[name]
            overrides = (*task.overrides, *args.baton_set)  # baton's words after its config
            print(f"\n{name}: {task.env_id}, {steps:,} env steps, seeds {','.join(map(str, args.seeds))}; evaluation: "
                  f"{args.eval_episodes} greedy episodes on {setup.evaluator_env_num} envs every {eval_every:,} env "
                  f"steps (baton: eval_freq {setup.eval_freq} updates = every {setup.eval_env_steps:,} env steps); "
                  f"wall times are training time, evaluations included", flush=True)
            print("\n".join(line for side, line in (
                ("sb3", f"  sb3    {zoo.algo}, rl-baselines3-zoo {zoo.zoo_entry}"),
                ("baton", f"  baton  {setup.source}{''.join(' ' + o for o in overrides)}"))
                if side in sides), flush=True)
            results["tasks"][name] = dict(env_id=task.env_id, budget=steps, eval_every=eval_every,
                                          sb3=dict(algo=zoo.algo, zoo_entry=zoo.zoo_entry),
                                          baton=dict(source=setup.source, eval_freq=setup.eval_freq,
                                                     eval_env_steps=setup.eval_env_steps,
                                                     overrides=list(overrides)),
                                          runs={side: [] for side in sides})
            for seed in args.seeds:  # alternating: SB3 seed 0, baton seed 0, SB3 seed 1, ...
                if "sb3" in sides:
                    work.append(functools.partial(run_sb3, name, task, seed, steps, eval_every, args.eval_episodes,
                                                  setup.evaluator_env_num, workdir))
                if "baton" in sides:
                    work.append(functools.partial(run_baton, name, setup, seed, steps, args.eval_episodes, workdir,
                                                  overrides))
                labels += [(name, side, seed) for side in sides]

        def record(index: int, run: Dict[str, Any]) -> None:
            name, framework, seed = labels[index]
            entry = results["tasks"][name]
            runs = entry["runs"]
            runs[framework] = sorted(runs[framework] + [run], key=lambda r: args.seeds.index(r["seed"]))
            print(f"  {name} {framework} seed {seed}: final {_score(run['curve'][-1][2] if run['curve'] else None)}, "
                  f"{run['env_step']} env steps, {run['train_iter']} updates in {run['wall_time_s']:.1f} s", flush=True)
            if all(len(runs[f]) == len(args.seeds) for f in runs):  # the task's last run: its table
                finals = {f: summarise(runs[f], None)["final"] for f in runs}
                entry["summary"] = {f: dict(summarise(runs[f], finals.get("baton" if f == "sb3" else "sb3"),
                                                      TASKS[name].solve_at), peer_ran=len(runs) == 2) for f in runs}
                print(f"\n{name} ({entry['env_id']}, {entry['budget']:,} env steps):\n"
                      + "\n".join(format_rows(entry["summary"])), flush=True)
            _write_json(args.json, results)  # after every run, so a long command stopped early keeps what it measured

        run_in_order(work, args.jobs, record)
    _write_json(args.json, results)


def run_in_order(work: Sequence[Callable[[], T]], jobs: int, on_done: Callable[[int, T], None]) -> None:
    """Call each of ``work`` in a thread, at most ``jobs`` at once, started in ``work``'s order; ``on_done(i,
    result)`` runs in the caller's thread as each ends. The first error starts nothing more and is raised once
    the calls already running have returned (each is a subprocess that no thread can stop halfway)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(call): i for i, call in enumerate(work)}
        try:
            for future in concurrent.futures.as_completed(futures):
                on_done(futures[future], future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _write_json(path: Optional[str], results: Mapping[str, Any]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
