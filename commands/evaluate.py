"""``baton eval``: greedy episodes of a trained run's policy on fresh envs, with videos if asked.

    baton eval RUN_DIR [--ckpt best|latest|PATH] [--episodes N] [--seed S] [--num-envs K] [-o FILE]
               [--video DIR [--gif] [--video-episodes M]]

The run's ``config.json`` builds the envs (its env type, id and settings; evaluation envs: Atari plays full
games with raw rewards) and the policy, which loads the checkpoint (``commands.saved_run``: ``best`` by
default, ``latest`` when the run wrote no best) and acts greedily, through its eval mode, on the CPU. A run
trained under DDP is evaluated the same way (rank 0 wrote its checkpoints).

The N episodes are split evenly over K envs before they start (as the training evaluator splits them, so
short episodes cannot crowd out long ones), env i reset with seed ``S + i``: the same command gives the same
numbers. The result, printed on one line and written as JSON to ``RUN_DIR/eval.json`` (or ``-o FILE``),
holds the mean, the standard deviation and the count of the episode returns, each return and length, the
checkpoint and its counters, and the seed.

``--video DIR`` writes env 0's episodes to ``DIR`` as mp4 files, ``--gif`` as GIFs instead
(``commands.video``; the ``video`` extra); K defaults to 1 then, so that every episode is filmed, and
``--video-episodes M`` keeps only the first M.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Dict, Optional

import numpy as np

from data.env_loop import EnvLoop
from data.envs import MAX_EVAL_EPISODES, make_vector_env
from engine.fileio import atomic_write_json
from middleware.evaluator import evaluate_episodes, success_rate
from pipelines.stages import env_label, env_params

from .run_options import EVAL_FILE
from .saved_run import import_user_modules, load_saved_run

#: the most episodes one ``baton eval`` plays (a training evaluation's bound, ``data.envs.MAX_EVAL_EPISODES``,
#: is 100 times smaller: this is the one-off evaluation that message points to)
MAX_EPISODES = 1_000_000

__all__ = ["evaluate_run", "eval_main", "EVAL_FILE", "MAX_EPISODES"]

logger = logging.getLogger(__name__)


def evaluate_run(run_dir: str, ckpt: Optional[str] = None, episodes: int = 10, seed: int = 0,
                 num_envs: Optional[int] = None, output: Optional[str] = None, video: Optional[str] = None,
                 gif: bool = False, video_episodes: Optional[int] = None) -> Dict[str, Any]:
    """Evaluate the run in ``run_dir`` (module docstring) and write the result as JSON.

    Args:
        run_dir: a training run's directory.
        ckpt: ``"best"``, ``"latest"`` or a checkpoint path; None: best, else latest.
        episodes: episodes to play (N).
        seed: env i is reset with ``seed + i``.
        num_envs: envs stepped together (K); default min(N, ``env.evaluator_env_num``), 1 with ``video``.
        output: the JSON file; default ``RUN_DIR/eval.json``.
        video: a directory for videos of env 0's episodes; None: no video.
        gif: write GIFs instead of mp4.
        video_episodes: film only this many episodes (default: all of env 0's).

    Returns:
        ``{"run_dir", "ckpt", "train_iter", "env_step", "env_id", "env", "seed", "episodes", "mean", "std",
        "min", "max", "returns", "lengths", "output", "videos"}``; ``env``: the id with its env type where that is
        not the id's own family (``pipelines.stages.env_label``).

    Raises:
        ValueError: a count below 1, ``gif`` without ``video``.
        pipelines.run_dir.RunDirError, middleware.checkpoint.CheckpointError: no run, no checkpoint.
        commands.video.VideoError: the env renders no RGB frames, or the video extra is missing.
        ImportError: the env family's extra is missing (named).
    """
    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    if episodes > MAX_EPISODES:
        raise ValueError(f"--episodes {episodes:,}: one evaluation of more than {MAX_EPISODES:,} episodes would run for "
                         f"days and keep every return; the mean of {MAX_EPISODES:,} already has a standard error of "
                         f"0.1% of the returns' spread. Give --episodes <= {MAX_EPISODES:,} (several commands with "
                         f"different --seed for more)")
    if num_envs is not None and num_envs > MAX_EVAL_EPISODES:
        raise ValueError(f"--num-envs {num_envs:,}: this process would make and step {num_envs:,} envs; give "
                         f"--num-envs <= {MAX_EVAL_EPISODES:,} (the most a training evaluation uses)")
    if video_episodes is not None and video_episodes < 1:
        raise ValueError(f"--video-episodes must be >= 1, got {video_episodes}")
    if gif and video is None:
        raise ValueError("--gif writes the --video episodes as GIFs: give --video DIR too")
    videos = None
    if video is not None:
        from .video import check_video_extra

        check_video_extra(gif)  # before the run is loaded: the missing extra is said at once
    run = load_saved_run(run_dir, ckpt)
    cfg = run.cfg
    if num_envs is None:
        num_envs = 1 if video is not None else min(episodes, env_params(cfg).evaluator_env_num)
    if num_envs < 1:
        raise ValueError(f"--num-envs must be >= 1, got {num_envs}")
    num_envs = min(num_envs, episodes)
    env_type, env_cfg = run.env_type, cfg.env
    if video is not None:
        from .video import EpisodeVideos, rendering_env_type, with_render_twin

        # an env type whose envs cannot be filmed as configured gives the settings they are filmed with (atari:
        # env.backend='envpool' plays through ale-py, whose screens its render twin shows)
        env_cfg = getattr(env_type, "for_video", lambda env_section: env_section)(env_cfg)

        env0_episodes = -(-episodes // num_envs)  # env 0's share of the episodes (evaluate_episodes' quota)
        prefix = f"{os.path.basename(os.path.normpath(run_dir))}-{os.path.basename(run.ckpt).split('.')[0]}"
        videos = EpisodeVideos(video, prefix, gif=gif,
                               max_episodes=min(env0_episodes, video_episodes or env0_episodes))
        env_type = rendering_env_type(run.env_type, env_cfg, videos)
    env = make_vector_env(env_type, env_cfg, num_envs, seed, manager="sync", training=False, groups=1)
    try:
        if videos is not None:
            env = with_render_twin(env, run.env_type, env_cfg, videos)
        played = evaluate_episodes(EnvLoop(run.policy.eval_mode, env, seed), episodes, seed)
    finally:
        if videos is not None:
            videos.close()
        env.close()
    returns = np.asarray(played["returns"], dtype=np.float64)
    ctx = run.state.get("ctx") or {}
    result = {"run_dir": run_dir, "ckpt": run.ckpt, "train_iter": ctx.get("train_iter"),
              "env_step": ctx.get("env_step"), "env_id": env_params(cfg).env_id, "env": env_label(cfg), "seed": seed,
              "episodes": int(returns.size), "mean": float(returns.mean()), "std": float(returns.std()),
              "min": float(returns.min()), "max": float(returns.max()), "returns": returns.tolist(),
              "lengths": [int(n) for n in played["lengths"]],
              "videos": list(videos.paths) if videos is not None else []}
    rate = success_rate(played)  # goal-conditioned envs (info["is_success"]): as eval/success_rate in training
    if rate is not None:
        result["success_rate"] = rate
    result["output"] = output or os.path.join(run_dir, EVAL_FILE)
    atomic_write_json(result["output"], result)
    return result


def eval_main(args: argparse.Namespace) -> int:
    """``baton eval``: one line with the result and where it was written, or one ``baton:`` line (status 2)."""
    from .user_errors import USER_ERRORS, exit_status, print_user_error
    from .video import VideoError, choose_gl_backend, gl_failure

    if args.video is not None:
        choose_gl_backend()  # before a MuJoCo env is made: headless machines render off screen
    try:
        import_user_modules(args.imports)
        result = evaluate_run(args.run_dir, args.ckpt, args.episodes, args.seed, args.num_envs, args.output,
                              args.video, args.gif, args.video_episodes)
    except (ValueError, ImportError, VideoError, *USER_ERRORS) as err:
        print_user_error(err)
        return exit_status(err)
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; the result file is written only at the end
        print("baton eval: interrupted; no result was written (the videos of finished episodes stay)",
              file=sys.stderr, flush=True)
        return 130
    except Exception as err:  # an env that cannot render off screen (MuJoCo without a display): name MUJOCO_GL
        failure = gl_failure(err) if args.video is not None else None
        if failure is None:
            raise
        print_user_error(failure)
        return 2
    print(f"baton eval: {result['run_dir']} {os.path.basename(result['ckpt'])} (train_iter {result['train_iter']}, "
          f"env_step {result['env_step']}) on {result['env']}: return {result['mean']:.2f} +- "
          f"{result['std']:.2f} over {result['episodes']} episodes (min {result['min']:.1f}, max "
          f"{result['max']:.1f}, seed {result['seed']})"
          + (f", success rate {result['success_rate']:.2f}" if "success_rate" in result else "")
          + f"; wrote {result['output']}", flush=True)
    for path in result["videos"]:
        print(f"baton eval: video {path}", flush=True)
    return 0
