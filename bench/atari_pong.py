"""Atari Pong: the bare vector env (sync and async), the collector with the DQN policy in the loop (serial
and overlapped with inference), bytes per stored transition, and learner updates/s, measured side by side in
one run, each after a warm-up.

- bare sync: ale-py's ``AtariVectorEnv`` of ``--envs`` envs stepped whole with random actions;
- bare async: the same envs with ``batch_size = envs / 2``: ``send`` a batch of actions, ``recv`` whichever
  half is ready first (ale-py's asynchronous mode, the emulator's ceiling);
- collector serial: ``StepCollector`` over one vector env, one Nature-CNN forward then one env step;
- collector overlapped (``env.manager.overlap``): two groups of ``envs / 2``; the policy acts on one while the
  other steps (``data.env_groups``).
- with EnvPool installed (the ``envpool`` extra), the same for ``env.backend='envpool'``: EnvPool's vector env bare
  (sync) and under the serial collector, beside ale-py's in the same rounds (issue 33, item 2).

Run: ``python bench/atari_pong.py [--envs 8] [--steps 300] [--repeats 3] [--compile none|compile|cudagraph|cudagraph_update]
[--amp none|bf16]`` (needs the atari extra; ``--compile``/``--amp`` set ``policy.compile``/``policy.amp``,
docs/performance.md). The
policy runs on cuda when there is one (``--device`` to choose); on a machine without CUDA it runs on the CPU,
where the Nature-CNN forward, not the emulator, sets the pace. torch's thread pool is sized as the pipeline
sizes it. Figures are the best of ``--repeats`` interleaved rounds.

With ``--minutes N`` it then trains the wall-clock config ``pong_<--algo>_config.py`` (PPO: 64 envs; DQN and Rainbow: 16)
for at most N minutes (or until its stop value, 20) and reports the evaluation return over time, the time to
a return of ``--target`` (18), env steps/s while training, each stage's share of the time (``--profile``) and
the GPU's mean utilisation while it trained (``torch.cuda.utilization``, else ``nvidia-smi``, sampled each
second)::

    python bench/atari_pong.py --minutes 10                      # PPO, the issue-11 target: >= 18 in 5 min
    python bench/atari_pong.py --minutes 20 --algo dqn --envs 16
    python bench/atari_pong.py --minutes 20 --algo rainbow --envs 16 --skip-throughput
    python bench/atari_pong.py --minutes 10 --skip-throughput --compile cudagraph
"""
from __future__ import annotations

import argparse
import copy
import importlib
import os
import subprocess
import tempfile
import threading
import time
from typing import List, Optional

import numpy as np
import torch

from dizoo.atari.config.serial.pong.pong_dqn_config import create_config, main_config
from dizoo.atari.envs import ATARI
from engine import OnlineRLContext, compile_config
from engine.devices import size_torch_threads
from data.envs import make_vector_env
from pipelines import stages
from policies import DQNPolicy

WARMUP_STEPS = 20


def bare_sync_steps_per_s(env, steps: int) -> float:
    num_envs = env.num_envs
    rng = np.random.default_rng(0)
    for _ in range(WARMUP_STEPS):
        env.step(rng.integers(0, 6, num_envs))
    start = time.perf_counter()
    for _ in range(steps):
        env.step(rng.integers(0, 6, num_envs))
    return steps * num_envs / (time.perf_counter() - start)


def bare_async_steps_per_s(env, steps: int) -> float:
    """``steps`` is in whole-env-count units, so sync and async step the same number of env steps."""
    batch = env.batch_size
    rng = np.random.default_rng(0)
    recvs = steps * env.num_envs // batch
    for _ in range(WARMUP_STEPS):
        env.send(rng.integers(0, 6, batch))
        env.recv()
    start = time.perf_counter()
    for _ in range(recvs):
        env.send(rng.integers(0, 6, batch))
        env.recv()
    return recvs * batch / (time.perf_counter() - start)


def collector_steps_per_s(collector, ctx: OnlineRLContext) -> float:
    before = ctx.env_step
    start = time.perf_counter()
    collector(ctx)
    return (ctx.env_step - before) / (time.perf_counter() - start)


class GpuUtilisation:
    """The GPU's utilisation (percent of time a kernel ran), sampled every ``period_s`` in a thread while a
    run goes on: ``torch.cuda.utilization`` (needs the NVML bindings), else ``nvidia-smi``'s query."""

    def __init__(self, device: str, period_s: float = 1.0) -> None:
        self.index = torch.device(device).index or 0
        self.period_s = period_s
        self.samples: List[float] = []
        self.source: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _read(self) -> Optional[float]:
        if self.source in (None, "torch.cuda.utilization"):
            try:
                value = float(torch.cuda.utilization(self.index))
                self.source = "torch.cuda.utilization"
                return value
            except Exception:  # no NVML bindings (pynvml): ask nvidia-smi
                self.source = "nvidia-smi"
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                  "-i", str(self.index)], capture_output=True, text=True, timeout=10)
            return float(out.stdout.strip().splitlines()[0])
        except Exception:
            self.source = "unavailable (no NVML bindings, no nvidia-smi)"
            return None

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            value = self._read()
            if value is None:
                return
            self.samples.append(value)

    def __enter__(self) -> "GpuUtilisation":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def report(self) -> str:
        if not self.samples:
            return f"GPU utilisation: no sample ({self.source or 'the run ended before the first'})"
        return (f"GPU utilisation while training: mean {np.mean(self.samples):.0f}%, median "
                f"{np.median(self.samples):.0f}% ({len(self.samples)} samples, {self.source})")


def busy_processes(limit: int = 5) -> List[str]:
    """The other processes using the most CPU time since they started (``ps``; empty where there is none): a
    throughput figure taken beside them measures them too."""
    try:
        rows = subprocess.run(["ps", "-eo", "pid,pcpu,etime,args", "--sort=-pcpu"], capture_output=True, text=True,
                              timeout=10).stdout.splitlines()[1:]
    except (OSError, subprocess.SubprocessError):
        return []
    own = {str(os.getpid()), str(os.getppid())}
    return [row[:160] for row in rows if row.split()[0] not in own and float(row.split()[1]) >= 10.0][:limit]


def machine_load(when: str) -> None:
    """Print the load average against the cores, and the busiest other processes where the machine is busy (the
    third GPU run's Pong collector ran at a quarter of the second's rate right after the GPU tests: a figure is
    only comparable with the machine's load beside it)."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    print(f"load average {when}: {load:.1f} on {cores} cores", flush=True)
    if load > 0.25 * cores:
        for row in busy_processes():
            print(f"  busy: {row}", flush=True)


def training_run(algo: str, minutes: float, device: str, compile_mode: str, amp: str, target: float,
                 out_dir: str) -> None:
    """Train ``pong_<algo>_config`` for at most ``minutes`` (a stage appended to its standard pipeline ends
    the run when the time is up) and print the evaluation return against wall time and env steps."""
    from middleware.progress_csv import PROGRESS_FILE, read_progress
    from pipelines import build_pipeline

    module = importlib.import_module(f"dizoo.atari.config.serial.pong.pong_{algo}_config")
    main_cfg, create_cfg = copy.deepcopy(module.main_config), copy.deepcopy(module.create_config)
    main_cfg.policy.cuda = device.startswith("cuda")
    main_cfg.policy.compile, main_cfg.policy.amp = compile_mode, amp
    if compile_mode == "cudagraph_update":  # the captured update draws from a replay on the learner's GPU
        main_cfg.policy.setdefault("other", {}).setdefault("replay_buffer", {})["device"] = "learn"
    main_cfg.log = dict(progress=False, profile=True)
    pipeline = build_pipeline((main_cfg, create_cfg), seed=0, exp_name=out_dir, force=True)
    budget_s = minutes * 60.0
    started = time.perf_counter()

    def wall_clock_budget(ctx) -> None:
        if time.perf_counter() - started >= budget_s:
            ctx.finish = True

    pipeline.append(wall_clock_budget, name="wall_clock_budget")
    machine_load("before training")
    gpu = GpuUtilisation(device) if device.startswith("cuda") else None
    print(f"training pong_{algo}_config for at most {minutes:g} min on {device} (policy.compile={compile_mode}, "
          f"policy.amp={amp}); run directory {out_dir}", flush=True)
    if gpu is not None:
        with gpu:
            summary = pipeline.run()
    else:
        summary = pipeline.run()
    wall = time.perf_counter() - started
    machine_load("after training (the last minute)")
    progress = read_progress(os.path.join(out_dir, PROGRESS_FILE))
    evals = ~np.isnan(progress.get("eval/episode_return_mean", np.full(len(progress["env_step"]), np.nan)))
    print(f"{'wall s':>8} {'env steps':>10} {'updates':>9} {'eval return':>12}")
    reached = None
    for i in np.flatnonzero(evals):
        ret = progress["eval/episode_return_mean"][i]
        print(f"{progress['wall_time_s'][i]:8.0f} {progress['env_step'][i]:10.0f} {progress['train_iter'][i]:9.0f} "
              f"{ret:12.1f}")
        if reached is None and ret >= target:
            reached = i
    print(f"stopped: {summary['stop_reason']} after {wall:.0f} s, {summary['env_step']} env steps "
          f"({summary['env_step'] / wall:.0f} env steps/s overall, start-up and evaluation included), "
          f"{summary['train_iter']} updates, best evaluation {summary['best_eval_return']}")
    last = {k: v[~np.isnan(v)][-1] for k, v in progress.items() if k.startswith("train/") and (~np.isnan(v)).any()}
    if last:  # PPO's entropy, approx_kl, clipfrac and (lr_schedule='adaptive') learning_rate at the end
        print("last training statistics: " + ", ".join(f"{k[6:]} {v:.4g}" for k, v in last.items()))
    if reached is None:
        print(f"time to >= {target:g}: not reached in {minutes:g} min")
    else:
        print(f"time to >= {target:g}: {progress['wall_time_s'][reached]:.0f} s, "
              f"{progress['env_step'][reached]:.0f} env steps")
    if "profile" in summary:
        from engine.profile import profile_table
        print(profile_table(summary["profile"]))
    if gpu is not None:
        print(gpu.report())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=8, help="Pong envs in the vector env and the collector")
    parser.add_argument("--steps", type=int, default=300, help="vector steps per throughput measurement")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the best is reported")
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", default="none", choices=["none", "compile", "cudagraph", "cudagraph_update"],
                        help="policy.compile for the acting forward and the learner")
    parser.add_argument("--amp", default="none", choices=["none", "bf16"], help="policy.amp")
    parser.add_argument("--minutes", type=float, default=0.0,
                        help="then train the wall-clock config for at most this long (0: no training run)")
    parser.add_argument("--algo", default="ppo", choices=["ppo", "dqn", "rainbow"], help="the config --minutes trains")
    parser.add_argument("--target", type=float, default=18.0, help="the evaluation return to time")
    parser.add_argument("--skip-throughput", action="store_true", help="only the training run")
    parser.add_argument("--out", default=None, help="the training run's directory (default: a temporary one)")
    args = parser.parse_args()
    if not args.skip_throughput:
        throughput(args)
    if args.minutes > 0:
        out = args.out or tempfile.mkdtemp(prefix=f"pong_{args.algo}_bench_")
        training_run(args.algo, args.minutes, args.device, args.compile, args.amp, args.target, out)


def throughput(args: argparse.Namespace) -> None:
    num_envs, device = args.envs, args.device
    cfg = compile_config(main_config, create_config, save=False)
    cfg.env.manager.overlap = False  # the wall-clock config groups its envs; here each measurement chooses
    cfg.env.collector_env_num = num_envs
    cfg.policy.collect.n_sample = num_envs * args.steps
    cfg.policy.compile, cfg.policy.amp = args.compile, args.amp
    threads = size_torch_threads(cfg.torch_threads)
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    print(f"device: {name} ({device}); {os.cpu_count()} CPU cores; torch threads {threads}; {num_envs} Pong envs; "
          f"policy.compile={args.compile} policy.amp={args.amp}")

    sync_env = make_vector_env(ATARI, cfg.env, num_envs, seed=0)
    async_cfg = dict(cfg.env, env_kwargs=dict(cfg.env.env_kwargs, batch_size=max(1, num_envs // 2)))
    async_env = make_vector_env(ATARI, async_cfg, num_envs, seed=0)
    for env in (sync_env, async_env):
        env.reset(seed=0)
    serial_env = make_vector_env(ATARI, cfg.env, num_envs, seed=0)
    grouped_env = make_vector_env(ATARI, cfg.env, num_envs, seed=0, groups=2)
    policy = DQNPolicy(cfg.policy, sync_env.single_observation_space, sync_env.single_action_space, device=device)
    collectors = {"serial": stages.collector(cfg, policy, serial_env, seed=0, on_policy=False),
                  "overlapped": stages.collector(cfg, policy, grouped_env, seed=0, on_policy=False)}
    contexts = {mode: OnlineRLContext() for mode in collectors}
    for mode, ctx in contexts.items():
        ctx.collect_kwargs["eps"] = 0.05
        collectors[mode](ctx)  # warm-up: first forwards (cuda context, kernels), resets
    envpool_envs = []
    try:  # EnvPool's backend beside ale-py's, where the envpool extra is installed
        envpool_cfg = dict(cfg.env, backend="envpool")
        envpool_envs = [make_vector_env(ATARI, envpool_cfg, num_envs, seed=0) for _ in range(2)]
        envpool_envs[0].reset(seed=0)
        collectors["envpool serial"] = stages.collector(cfg, policy, envpool_envs[1], seed=0, on_policy=False)
        contexts["envpool serial"] = OnlineRLContext()
        contexts["envpool serial"].collect_kwargs["eps"] = 0.05
        collectors["envpool serial"](contexts["envpool serial"])
    except ImportError as err:
        print(f"EnvPool not measured: {err}")
    figures = {key: [] for key in ("sync", "async", *(("envpool sync",) if envpool_envs else ()), *collectors)}
    for _ in range(args.repeats):
        figures["sync"].append(bare_sync_steps_per_s(sync_env, args.steps))
        figures["async"].append(bare_async_steps_per_s(async_env, args.steps))
        if envpool_envs:
            figures["envpool sync"].append(bare_sync_steps_per_s(envpool_envs[0], args.steps))
        for mode in collectors:
            figures[mode].append(collector_steps_per_s(collectors[mode], contexts[mode]))
    best = {key: max(values) for key, values in figures.items()}
    if envpool_envs:
        print(f"bare EnvPool, sync, random actions:                   {best['envpool sync']:8.0f} env steps/s; "
              f"EnvPool / AtariVectorEnv: {best['envpool sync'] / best['sync']:.2f} (per round: "
              f"{', '.join(f'{e / a:.2f}' for e, a in zip(figures['envpool sync'], figures['sync']))})")
        print(f"StepCollector serial on EnvPool + DQN:               {best['envpool serial']:8.0f} env steps/s; "
              f"of the ale-py serial collector {best['envpool serial'] / best['serial']:.2f}")
    print(f"bare AtariVectorEnv, sync, random actions:            {best['sync']:8.0f} env steps/s")
    print(f"bare AtariVectorEnv, async (batch {num_envs // 2}), random actions: {best['async']:8.0f} env steps/s")
    for mode in ("serial", "overlapped"):
        print(f"StepCollector {mode:10s} + DQN (Nature CNN, eps 0.05): {best[mode]:8.0f} env steps/s; "
              f"of bare sync {best[mode] / best['sync']:.2f}, of bare async {best[mode] / best['async']:.2f}")
    print(f"overlapped / serial collector: {best['overlapped'] / best['serial']:.2f} (per round: "
          f"{', '.join(f'{o / s:.2f}' for o, s in zip(figures['overlapped'], figures['serial']))})")

    ctx = contexts["serial"]
    params = policy.params
    buffer = stages.replay_buffer(params.other.replay_buffer, priority=params.priority, seed=0, frame_stack=4,
                                  num_envs=num_envs)
    buffer.push(ctx.trajectories)
    per = buffer.storage.bytes_per_transition()
    full = 2 * 4 * 84 * 84
    print(f"replay bytes per transition: {per:.0f} (full obs + next_obs stacks: {full}); "
          f"1M transitions: {per * 1e6 / 2**30:.1f} GiB (full stacks: {full * 1e6 / 2**30:.1f} GiB)")

    batch_size = cfg.policy.learn.batch_size
    for _ in range(3):  # warm-up: the first updates compile, and record the CUDA graphs (policy.compile)
        policy.learn_mode.forward(buffer.sample(batch_size))
    start = time.perf_counter()
    for _ in range(args.updates):
        policy.learn_mode.forward(buffer.sample(batch_size))
    print(f"DQN learner on {device}: {args.updates / (time.perf_counter() - start):.1f} updates/s (batch {batch_size})")
    for env in (sync_env, async_env, serial_env, grouped_env, *envpool_envs):
        env.close()


if __name__ == "__main__":
    main()
