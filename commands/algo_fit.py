"""The quick answer to an ``--algo``/``--env`` pair whose action space the algorithm does not take.

``commands.algo_env`` asks each policy itself whether it builds on the env's spaces, which imports torch and
every policy and builds each one: seconds before ``baton train --algo dqn --env Pendulum-v1`` says that DQN
takes discrete actions. What the classes declare (``action_spaces``, read from their source by
``commands.catalog``) and the env's action space (one ``gymnasium.make``, no torch) settle the common case
first; everything else (a bounded action space, an observation that is not flat, an id gymnasium does not
know, a user's module) is left to ``algo_env``'s full check.
"""
from __future__ import annotations

from typing import Optional

from .catalog import declared_action_spaces

__all__ = ["AlgoEnvError", "declared_misfit"]


class AlgoEnvError(ValueError):
    """An ``--algo`` / ``--env`` pair that cannot make a config; the message lists what would."""


def declared_misfit(algo: str, env_id: str) -> Optional[str]:
    """The one-line refusal of ``algo`` on ``env_id`` when the env's action space is of a kind the algorithm
    does not declare, naming the algorithms that do; None when the declarations do not settle it."""
    declared = declared_action_spaces()
    if algo not in declared or ":" in env_id:
        return None
    kind = _action_kind(env_id)
    if kind is None or kind[0] in declared[algo]:
        return None
    fit = [name for name, kinds in declared.items() if kind[0] in kinds]
    takes = " and ".join(declared[algo]) or "no"
    return (f"--algo {algo} does not fit --env {env_id} (action space {kind[1]}): {algo} takes {takes} actions. "
            f"Algorithms that fit: {', '.join(fit) or 'none'}")


def _action_kind(env_id: str) -> Optional[tuple]:
    """``("discrete" | "continuous", the space)`` of ``env_id``'s action space, made once; None for another
    kind of space or an env that cannot be made here (the full check says why)."""
    import gymnasium as gym

    if env_id not in gym.registry:
        return None
    try:
        env = gym.make(env_id)
    except Exception:  # a missing extra, a broken install: the full check names it
        return None
    try:
        space = env.action_space
    finally:
        env.close()
    if isinstance(space, gym.spaces.Discrete):
        return "discrete", space
    if isinstance(space, gym.spaces.Box):
        return "continuous", space
    return None
