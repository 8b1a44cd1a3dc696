"""Evaluation by interaction: greedy episodes on envs kept apart from the collector's, stepped through the one env
loop (``data.env_loop.EnvLoop``), as the collector's are."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from data.env_loop import EnvLoop
from engine.context import OnlineRLContext, StopReason
from engine.distributed import get_world_size
from engine.protocols import EvalPolicy, VectorEnv, require

from .termination import global_env_step

__all__ = ["InteractionEvaluator", "evaluate_episodes", "NewEvaluation", "EvaluationCancelled", "evaluation_due",
           "evaluation_output", "publish_evaluation", "final_evaluation", "final_evaluation_due",
           "success_rate"]

#: the stop reasons of a run that ran out of budget, which ``final_evaluation`` evaluates at
BUDGETS = (StopReason.MAX_ENV_STEP, StopReason.MAX_TRAIN_ITER)


class EvaluationCancelled(Exception):
    """``evaluate_episodes`` stopped between two env steps because its ``should_stop`` said so."""


#: steps between two reads of which episodes ended, where the envs are on a device (torch envs on a GPU): a
#: solved CartPole's evaluation is 500 steps, and a read at each waits for the device each time
DEVICE_READ_EVERY = 16


def evaluate_episodes(loop: EnvLoop, n_episode: int, seed: int,
                      should_stop: Optional[Callable[[], bool]] = None) -> Dict[str, Any]:
    """Reset ``loop``'s envs with ``seed`` and run ``n_episode`` episodes; returns returns and lengths, and
    ``successes``: whether each episode met its goal, for the episodes whose env said (``info["is_success"]``,
    ``EnvStep.success``; absent where none did), and ``agent_returns``: each episode's return per agent,
    where each env holds several (``data.parallel_envs``; ``returns`` holds their means).

    The episodes are split evenly over the envs before starting (env i runs its own quota), so short
    episodes cannot crowd out long ones and bias the mean.

    Raises:
        EvaluationCancelled: ``should_stop()`` returned True before an env step (a background evaluation
            being cancelled: it checks between steps, so it ends within one step).
    """
    num_envs = loop.num_envs
    quota = np.array([n_episode // num_envs + (i < n_episode % num_envs) for i in range(num_envs)])
    done_count = np.zeros(num_envs, dtype=np.int64)
    returns: List[float] = []
    lengths: List[int] = []
    successes: List[bool] = []
    agent_returns: List[List[float]] = []  # several agents per env: each one's return per episode
    loop.reset(seed)
    unread = 0  # a device's envs: steps since their ends were last read
    while (done_count < quota).any():
        if should_stop is not None and should_stop():
            raise EvaluationCancelled(f"cancelled after {len(returns)} of {n_episode} episodes")
        step = loop.step()
        if step.any_ended is None and step.success is None:  # the envs are on a device: their ends are read
            unread += 1  # every DEVICE_READ_EVERY steps, not at each (a wait for the device per step)
            if unread < DEVICE_READ_EVERY:
                continue
            unread = 0
        elif not step.has_ended():  # evaluation reads each step's ends: they decide when it stops
            continue
        # the episodes ended since the last read, by step then env: taken in that order, as one step at a time
        # would, so the same episodes meet each env's quota (at most DEVICE_READ_EVERY - 1 steps more are run)
        finished = loop.finished()
        success = step.success.tolist() if step.success is not None else None
        per_agent = finished.agent_returns.tolist() if finished.agent_returns is not None else None
        for k, (i, episode_return, length) in enumerate(zip(finished.envs.tolist(), finished.returns.tolist(),
                                                            finished.lengths.tolist())):
            if done_count[i] < quota[i]:
                returns.append(episode_return)
                lengths.append(length)
                if per_agent is not None:
                    agent_returns.append(per_agent[k])
                if success is not None and success[i] >= 0:
                    successes.append(success[i] == 1)
                done_count[i] += 1
    episodes: Dict[str, Any] = {"returns": returns, "lengths": lengths}
    if successes:  # the episodes whose env said whether it met its goal
        episodes["successes"] = successes
    if agent_returns:
        episodes["agent_returns"] = agent_returns
    return episodes


def evaluation_output(episodes: Dict[str, Any], *, train_iter: int, env_step: int, duration: float) -> Dict[str, Any]:
    """``ctx.eval_output`` of the episodes ``evaluate_episodes`` ran with the weights of ``train_iter`` /
    ``env_step`` (where logs plot the result)."""
    returns = np.asarray(episodes["returns"])
    output = {"returns": episodes["returns"], "lengths": episodes["lengths"], "mean": float(returns.mean()),
              "std": float(returns.std()), "train_iter": train_iter, "env_step": env_step, "duration": duration}
    rate = success_rate(episodes)
    if rate is not None:
        output["success_rate"] = rate
    if "agent_returns" in episodes:  # several agents per env: each one's mean return, in the env's agent order
        output["agent_means"] = np.asarray(episodes["agent_returns"]).mean(0).tolist()
    return output


def success_rate(episodes: Dict[str, Any]) -> Optional[float]:
    """The share of ``evaluate_episodes``' episodes that met their goal, of those whose env said (goal-conditioned
    envs, ``info["is_success"]``); None where no env said."""
    return float(np.mean(episodes["successes"])) if "successes" in episodes else None


def publish_evaluation(ctx: OnlineRLContext, output: Dict[str, Any], stop_value: float) -> None:
    """Write an evaluation into ``ctx`` (``eval_value``, ``last_eval_value``, ``last_eval_iter``: the
    ``train_iter`` it evaluated, ``eval_output``) and finish the run with ``StopReason.STOP_VALUE`` when its
    mean reaches ``stop_value``."""
    ctx.eval_value = ctx.last_eval_value = output["mean"]
    ctx.last_eval_iter = output["train_iter"]
    ctx.eval_output = output
    if output["mean"] >= stop_value:
        ctx.finish = True
        ctx.stop_reason = StopReason.STOP_VALUE


def evaluation_due(ctx: OnlineRLContext, eval_freq: int) -> bool:
    """Whether an evaluation is due: after the first update, then every ``eval_freq`` train iterations
    after the last one (``ctx.last_eval_iter``).

    Not before the first update: an untrained policy that happens to reach the stop value (a greedy random
    network balances CartPole for some seeds) would end a run that learned nothing.
    """
    if ctx.last_eval_iter < 0:
        return ctx.train_iter > 0
    return ctx.train_iter - ctx.last_eval_iter >= eval_freq


class NewEvaluation:
    """Answers, for one middleware, whether an evaluation happened since it last asked (loggers, savers
    and the summary react to each evaluation once)."""

    def __init__(self) -> None:
        self._seen_iter = -1

    def __call__(self, ctx: OnlineRLContext) -> bool:
        if ctx.eval_output is None or ctx.last_eval_iter == self._seen_iter:
            return False
        self._seen_iter = ctx.last_eval_iter
        return True


class InteractionEvaluator:
    """After the first update and then every ``eval_freq`` train iterations, run ``n_episode`` episodes
    and write ``ctx.eval_value`` (mean return), ``ctx.eval_output``, ``ctx.last_eval_iter`` and
    ``ctx.last_eval_value``. When the mean reaches ``stop_value`` the task finishes with
    ``ctx.stop_reason = StopReason.STOP_VALUE``.

    Each evaluation starts its envs from new seeds, so successive evaluations see different starts.

    Args:
        policy: ``policy.eval_mode``.
        env: vector env for evaluation only (not the collector's).
        eval_freq: train iterations between evaluations.
        n_episode: episodes per evaluation.
        stop_value: mean return that stops the run (``float("inf")``: never).
        seed: evaluation ``k`` resets env i with ``seed + 100000 + k * num_envs + i``.
        on_evaluation: called with ``ctx`` right after each evaluation is published, while the weights are the
            ones evaluated (``CkptSaver.on_evaluation`` writes a new best from them).

    An evaluation is labelled (``eval_output["env_step"]``) with the env steps the ranks agree on at the end
    of its iteration (``middleware.termination.global_env_step``): in one process, and at an iteration's start
    under DDP, ``ctx.env_step``; after the iteration's collection under DDP (``final_evaluation``), also the
    other ranks' share, which ``ctx.env_step`` holds only once the ddp middleware has summed the counts.
    """

    def __init__(self, policy: EvalPolicy, env: VectorEnv, *, eval_freq: int, n_episode: int,
                 stop_value: float = float("inf"), seed: int = 0,
                 on_evaluation: Optional[Callable[[OnlineRLContext], None]] = None) -> None:
        require(policy, EvalPolicy, "the evaluator's policy")
        self._on_evaluation = on_evaluation
        self._loop = EnvLoop(policy, env, seed)
        self._eval_freq = int(eval_freq)
        self._n_episode = int(n_episode)
        self._stop_value = float(stop_value)
        self._seed = seed + 100_000
        self._count = 0
        self._world_size = get_world_size()
        if self._n_episode <= 0:
            raise ValueError(f"env.n_evaluator_episode must be positive, got {self._n_episode}")

    def should_evaluate(self, ctx: OnlineRLContext) -> bool:
        return evaluation_due(ctx, self._eval_freq)

    def __call__(self, ctx: OnlineRLContext) -> None:
        if self.should_evaluate(ctx):
            self.evaluate(ctx)

    def evaluate(self, ctx: OnlineRLContext, stop_value: Optional[float] = None) -> None:
        """Evaluate now and publish the result into ``ctx`` (finishing the run at ``stop_value``, by default
        the evaluator's own)."""
        start = time.perf_counter()
        episodes = evaluate_episodes(self._loop, self._n_episode, self._seed + self._count * self._loop.num_envs)
        self._count += 1
        output = evaluation_output(episodes, train_iter=ctx.train_iter,
                                   env_step=global_env_step(ctx, self._world_size),
                                   duration=time.perf_counter() - start)
        publish_evaluation(ctx, output, self._stop_value if stop_value is None else stop_value)
        if self._on_evaluation is not None:
            self._on_evaluation(ctx)


def final_evaluation_due(ctx: OnlineRLContext, evaluated_iter: Optional[int] = None) -> bool:
    """Whether the run ends at its budget (``max_env_step``, ``max_train_iter``) with updates no evaluation has
    seen: the rule of the final evaluation, blocking (``final_evaluation``) or in the background
    (``middleware.background_eval``). ``evaluated_iter``: the ``train_iter`` of the weights last evaluated, or
    being evaluated (default ``ctx.last_eval_iter``)."""
    seen = max(ctx.last_eval_iter, 0) if evaluated_iter is None else evaluated_iter
    return bool(ctx.finish) and ctx.stop_reason in BUDGETS and ctx.train_iter > seen


def final_evaluation(evaluator: InteractionEvaluator,
                     seen: Optional[Callable[[OnlineRLContext], None]] = None) -> Callable[[OnlineRLContext], None]:
    """Middleware for the end of a pipeline, after its termination stage: when the run ends at its budget
    (``max_env_step``, ``max_train_iter``) with updates the last evaluation has not seen, the final weights are
    evaluated once. The summary's ``eval_return``, progress.csv's last evaluation and the best checkpoint then
    speak of the policy the run ends with, not of the one ``eval_freq`` updates before, at the env_step the run
    ends at (under DDP the count the ranks agree on at the end of the iteration, not rank 0's share of it so
    far). It stops nothing: the result is published without a stop value (the run has ended at its budget
    already).

    ``seen``: told of ``ctx`` just before, when this iteration's evaluator has evaluated already: the final
    evaluation replaces ``ctx.eval_output``, and a stage that reads it after the iteration (the run summary's best
    return, ``middleware.summary``) would miss the earlier one."""

    def final_evaluation(ctx: OnlineRLContext) -> None:
        if final_evaluation_due(ctx):
            if seen is not None:
                seen(ctx)
            evaluator.evaluate(ctx, stop_value=float("inf"))

    return final_evaluation
