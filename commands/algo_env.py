"""``baton train --algo ALGO --env ENV_ID``: a config built from defaults alone, with no config file.

The policy's ``default_config()`` and the env family's defaults make the config; the model is sized from
the env's spaces (policies fill ``policy.model.obs_shape`` / ``action_shape`` when they are None). The
env family is chosen by the id:

- a registered env type whose own id it is (``CartPole-v1`` -> ``cartpole``, ``CartPole-torch`` ->
  ``cartpole_torch``): its defaults, stop value included;
- a multi-agent task an env type knows (``simple_spread_v3`` -> ``mpe``, a PettingZoo env's module such as
  ``mpe2.simple_reference_v3`` -> ``pettingzoo``: its ``has_task``): the agents' batched
  spaces (``data.parallel_envs``), which only the multi-agent algorithms take;
- an Atari id (``ALE/Pong-v5``, ``PongNoFrameskip-v4``: ids ale-py registers) -> ``atari``;
- any other gymnasium id with a flat Box observation and Discrete or Box actions -> ``gym``, the generic
  type registered here; its stop value is the gymnasium spec's ``reward_threshold``, or none (``inf``).

``create_config.env.import_names`` names this module for ``gym``, so every process (``--nproc``'s ranks import
the config afresh) registers the type before compiling. Before anything runs, the algorithm is built once on
the env's spaces: one that does not fit (``dqn`` on ``Pendulum-v1``) fails at once, naming the action space
and the algorithms that do fit.

An algorithm of the user's own module is ``--algo my_module:my_algo``: the module (on ``PYTHONPATH``) is imported
and named in ``create_config.policy.import_names``, as a config file of that algorithm would name it.
"""
from __future__ import annotations

import difflib
import logging
import math
import re
from typing import Any, Dict, NamedTuple, Optional, Tuple

import gymnasium as gym
from easydict import EasyDict

from data.action_masks import as_trainable
from data.envs import episode_limit, registered_id
from data.parallel_envs import AgentSpaceError
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from policies.base import SpaceMismatchError

from .algo_fit import AlgoEnvError
from .catalog import ATARI_TYPE, GYM_TYPE

__all__ = ["AlgoEnvError", "build_config", "registered_algo", "algo_support", "default_budget", "GYM_TYPE"]

logger = logging.getLogger(__name__)

#: the episode limit of an ``--env`` id that registers none (CliffWalking-v1): without one, the greedy policy of
#: an evaluation can walk in a circle forever and the run never ends
DEFAULT_EPISODE_LIMIT = 1_000

_PROBE_OBS = gym.spaces.Box(-1.0, 1.0, (4,))
_PROBE_ACTIONS = {"discrete": gym.spaces.Discrete(2), "continuous": gym.spaces.Box(-1.0, 1.0, (1,))}
#: three agents' row (``data.parallel_envs``), for the multi-agent algorithms
_AGENTS_OBS = gym.spaces.Dict({"obs": gym.spaces.Box(-1.0, 1.0, (3, 4)), "alive": gym.spaces.Box(0, 1, (3,), "int8"),
                               "state": gym.spaces.Box(-1.0, 1.0, (12,))})
_AGENTS_ACTIONS = {"discrete": gym.spaces.MultiDiscrete([2, 2, 2]), "continuous": gym.spaces.Box(-1.0, 1.0, (3, 1))}


def build_config(algo: str, env_id: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(main_config, create_config)`` for ``algo`` on the gymnasium id ``env_id``.

    Raises:
        AlgoEnvError: unknown algo (lists the registered ones), unknown id (the closest gymnasium ids), an
            env whose spaces no baton algorithm takes, or an algo that does not fit the env's spaces (names
            the action space and the algos that do).
    """
    module, algo = registered_algo(algo)
    algos = POLICY_REGISTRY.names()
    if algo not in algos:
        close = difflib.get_close_matches(algo.lower(), algos, n=1, cutoff=0.6)
        raise AlgoEnvError(f"--algo {algo!r} is not a registered algorithm; choose one of {', '.join(algos)} "
                           f"{f'(did you mean {close[0]!r}?) ' if close else ''}(baton train --list-algos)")
    env_type, observation_space, action_space, stop_value, env_keys = _resolve_env(env_id)
    misfit = _misfit(algo, observation_space, action_space)
    if (misfit is not None and getattr(ENV_REGISTRY.get(env_type), "has_task", None) is not None
            and not getattr(POLICY_REGISTRY.get(algo), "multi_agent", False)):  # a multi-agent one: its own reason
        misfit = (f"{env_id} has several agents in each env, which {algo} does not train (it trains one agent per "
                  f"env)")
    if misfit is not None:
        fit = [a for a in algos if _misfit(a, observation_space, action_space) is None]
        raise AlgoEnvError(f"--algo {algo} does not fit --env {env_id} (action space {action_space}): {misfit}. "
                           f"Algorithms that fit: {', '.join(fit) or 'none'}")
    env: Dict[str, Any] = dict(env_id=env_id, **env_keys)
    if env_keys.get("pad_agents"):
        logger.info("--env %s: its agents' spaces differ, so each agent's observation is zero-padded to the largest "
                    "and its actions masked to its own (env.pad_agents=true, data.agent_padding)", env_id)
    if stop_value is not None:
        env["stop_value"] = stop_value
    if env_type == GYM_TYPE and episode_limit(env) is None:  # an evaluation must end: the greedy policy may loop
        env["max_episode_steps"] = DEFAULT_EPISODE_LIMIT
        logger.info("--env %s registers no episode limit: its episodes are cut at %s steps, so that an evaluation "
                    "ends (env.max_episode_steps=N to choose)", env_id, f"{DEFAULT_EPISODE_LIMIT:,}")
    create: Dict[str, Any] = dict(env=dict(type=env_type), policy=dict(type=algo))
    if module:  # every process (--nproc's ranks) and the run's config.json import it too
        create["policy"]["import_names"] = [module]
    if env_type == GYM_TYPE:
        create["env"]["import_names"] = [__name__]
    exp_name = f"{algo}_{re.sub(r'[^A-Za-z0-9._-]+', '_', env_id)}"
    return dict(exp_name=exp_name, env=env, policy=_hindsight(algo, env_id, observation_space)), create


def registered_algo(algo: str) -> Tuple[str, str]:
    """``(module, name)`` of ``--algo``: ``"my_module:my_algo"`` (an algorithm of the user's own module, as ``--env``
    takes ``"my_module:MyEnv-v0"``) imports the module, which registers ``my_algo``; a plain name has no module.

    Raises:
        engine.registry.ImportNamesError: the module cannot be imported (naming it and PYTHONPATH).
    """
    module, _, name = algo.rpartition(":")
    if module:
        POLICY_REGISTRY.import_modules([module], key="--algo")
    return module, name


def _hindsight(algo: str, env_id: str, observation_space: gym.Space) -> Dict[str, Any]:
    """The policy section of a goal-conditioned env (a Dict observation with ``achieved_goal`` and
    ``desired_goal``) for an algorithm with a replay: hindsight goals on (``data.replay.her``, the paper's
    ``future`` strategy and 4 relabels), one-step returns and uniform sampling (Rainbow's priorities off); said in
    one line. Empty otherwise."""
    policy_cls = POLICY_REGISTRY.get(algo)
    keys = getattr(observation_space, "spaces", None) or {}
    if policy_cls.pipeline != "off_policy" or not {"achieved_goal", "desired_goal"} <= set(keys):
        return {}
    policy: Dict[str, Any] = dict(nstep=1, other=dict(replay_buffer=dict(her=dict(strategy="future"))))
    if policy_cls.default_config().get("priority"):
        policy["priority"] = False
    logger.info("--env %s is goal-conditioned (achieved_goal, desired_goal): --algo %s replays it with hindsight "
                "goals, policy.other.replay_buffer.her.strategy='future' with %s (strategy='none' to switch them "
                "off)", env_id, algo, " and ".join(f"policy.{k}={v}" for k, v in policy.items() if k != "other"))
    return policy


def default_budget(algo: str) -> Optional[int]:
    """The env-step budget of an ``--algo/--env`` run given none: the algorithm family's
    (``Policy.default_env_steps``: DQN 500k, PPO, A2C and SAC 1M); None for algorithms that learn from a
    dataset, whose pipeline has an update budget of its own. Logged, so the end is never a surprise."""
    algo = registered_algo(algo)[1]
    steps = getattr(POLICY_REGISTRY.get(algo), "default_env_steps", None)
    if steps is not None:
        logger.info("--algo %s sets a budget of %s env steps (--max-env-step N to choose)", algo, f"{steps:,}")
    return steps


def algo_support(algo: str) -> Dict[str, bool]:
    """``{"discrete": bool, "continuous": bool}``: whether ``algo`` builds on a flat observation with
    Discrete / Box actions, or a multi-agent algorithm on three agents' (asked of the policy itself, so a newly
    registered one is described truly)."""
    if getattr(POLICY_REGISTRY.get(algo), "multi_agent", False):
        return {kind: _misfit(algo, _AGENTS_OBS, space) is None for kind, space in _AGENTS_ACTIONS.items()}
    return {kind: _misfit(algo, _PROBE_OBS, space) is None for kind, space in _PROBE_ACTIONS.items()}


# ---- helpers ---------------------------------------------------------------------------------------
class ResolvedEnv(NamedTuple):
    """What ``--env`` names: its type, its spaces as the policy sees them, its stop value (None: the family's own)
    and the ``env`` keys it needs besides ``env_id`` (agents of different spaces: ``pad_agents``)."""

    type: str
    observation_space: gym.Space
    action_space: gym.Space
    stop_value: Optional[float]
    env_keys: Dict[str, Any]


def _agents_probe(env_type: Any, env_id: str) -> Tuple[Any, Dict[str, Any]]:
    """One env of a multi-agent task, and the ``env`` keys it needs: agents whose spaces differ are padded to one
    (``env.pad_agents``) where padding can join them; otherwise the first refusal stands."""
    cfg = dict(env_type.default_config(), env_id=env_id)
    try:
        return env_type.make_vector(cfg, 1, 0, False), {}
    except AgentSpaceError:
        if "pad_agents" not in cfg:
            raise
        try:
            return env_type.make_vector(dict(cfg, pad_agents=True), 1, 0, False), {"pad_agents": True}
        except ValueError as err:
            raise AgentSpaceError(f"{err} (env.pad_agents cannot join its agents either)") from None


def _resolve_env(env_id: str) -> ResolvedEnv:
    """``--env``'s type, spaces and stop value (``ResolvedEnv``); an env of the user's own module as
    ``"module:EnvId-v0"`` (gymnasium's syntax: the module is imported, here and in every process that makes the
    env)."""
    if ":" in env_id:
        spec = _spec(registered_id(env_id, "--env"))
        observation_space, action_space = _flat_spaces(env_id)
        return ResolvedEnv(GYM_TYPE, observation_space, action_space, _threshold(spec), {})
    if env_id not in gym.registry:  # a batched torch env's id (CartPole-torch), a multi-agent task: its type's
        for name in ENV_REGISTRY.names():
            env_type = ENV_REGISTRY.get(name)
            if getattr(env_type, "has_task", None) is not None and env_type.has_task(env_id):
                venv, env_keys = _agents_probe(env_type, env_id)
                try:
                    return ResolvedEnv(name, venv.single_observation_space, venv.single_action_space, None, env_keys)
                finally:
                    venv.close()
            if getattr(env_type, "batched", False) and env_type.env_id == env_id:
                return ResolvedEnv(name, env_type.env_cls.single_observation_space,
                                   env_type.env_cls.single_action_space, None, {})
    spec = _spec(env_id)
    if isinstance(spec.entry_point, str) and spec.entry_point.startswith("ale_py"):
        return _atari(env_id)
    # a variant of a task (cartpole_masked) is chosen by name, not by id (its type's by_id is False)
    family = next((name for name in ENV_REGISTRY.names()
                   if name != GYM_TYPE and getattr(ENV_REGISTRY.get(name), "env_id", None) == env_id
                   and getattr(ENV_REGISTRY.get(name), "by_id", True)), None) or _package_family(spec)
    if family is not None and hasattr(ENV_REGISTRY.get(family), "check_requires"):
        try:  # the family's extra named before gymnasium's own hint (MuJoCo ids without the mujoco extra)
            ENV_REGISTRY.get(family).check_requires(env_id)
        except ImportError as err:
            raise AlgoEnvError(f"--env {env_id}: {err}") from err
    observation_space, action_space = _flat_spaces(env_id, ENV_REGISTRY.get(family) if family is not None else None)
    if family is not None:
        return ResolvedEnv(family, observation_space, action_space, None, {})
    return ResolvedEnv(GYM_TYPE, observation_space, action_space, _threshold(spec), {})


def _threshold(spec: Any) -> float:
    """A gymnasium spec's ``reward_threshold``; infinite where it has none."""
    return float(spec.reward_threshold) if spec.reward_threshold is not None else math.inf


def _package_family(spec: Any) -> Optional[str]:
    """The env type that takes every id of a package (its ``entry_point_prefix``: ``minigrid``), where ``spec``'s
    entry point is in it."""
    entry = spec.entry_point if isinstance(spec.entry_point, str) else getattr(spec.entry_point, "__module__", "")
    return next((name for name in ENV_REGISTRY.names()
                 if (prefix := getattr(ENV_REGISTRY.get(name), "entry_point_prefix", None))
                 and (entry == prefix or entry.startswith(prefix + ".") or entry.startswith(prefix + ":"))), None)


def _flat_spaces(env_id: str, env_type: Any = None) -> Tuple[gym.Space, gym.Space]:
    """``_spaces``, refusing an observation that is not one flat Box (what ``--env`` takes)."""
    observation_space, action_space = _spaces(env_id, env_type)
    flat = isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1
    if not (flat or isinstance(observation_space, (gym.spaces.Dict, gym.spaces.Tuple))):
        raise AlgoEnvError(f"--env {env_id}: its observation space {observation_space} is neither a flat Box nor a "
                           f"Dict/Tuple of spaces; --env takes those and Atari ids (wrap the env's observation "
                           f"in a Dict with a gymnasium wrapper, or write a config with an env type of your own)")
    return observation_space, action_space


def _spec(env_id: str) -> Any:
    """gymnasium's spec of ``env_id`` (Atari ids appear once ale-py is imported); unknown: the closest ids."""
    if env_id not in gym.registry:
        try:
            import ale_py  # noqa: F401  registers ALE/* and *NoFrameskip-v4
        except ImportError:
            if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
                raise AlgoEnvError(f"--env {env_id}: Atari ids need ale-py: pip install -c constraints.txt "
                                   f"-e \".[atari]\"") from None
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise AlgoEnvError(f"--env {env_id!r} is not a gymnasium id{hint} (baton train --list-envs)")
    return gym.spec(env_id)


def _spaces(env_id: str, env_type: Any = None) -> Tuple[gym.Space, gym.Space]:
    """The spaces the env has in training: made by its family's env type when it has one (MuJoCo's float32
    observations; its warnings to the log, not a MUJOCO_LOG.TXT here), else by ``gym.make``."""
    try:
        if env_type is not None:
            env = env_type.make(dict(env_type.default_config(), env_id=env_id))
        else:  # as the generic type makes it: a mask in the observation, a lone Discrete in a dict
            env = as_trainable(gym.make(env_id))
    except (ImportError, gym.error.Error) as err:  # e.g. box2d ids without the box2d extra
        raise AlgoEnvError(f"--env {env_id}: cannot make it: {err}") from err
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _atari(env_id: str) -> ResolvedEnv:
    """The atari family's spaces: stacked 84x84 grey frames, the game's minimal action set. Its stop value
    (20, Pong's) is kept for Pong only; other games have none."""
    if ATARI_TYPE not in ENV_REGISTRY.names():
        raise AlgoEnvError(f"--env {env_id}: the {ATARI_TYPE!r} env type is not installed")
    defaults = ENV_REGISTRY.get(ATARI_TYPE).default_config()
    observation_space = gym.spaces.Box(0, 255, (int(defaults["frame_stack"]), 84, 84), dtype="uint8")
    _, action_space = _spaces(env_id)
    same_game = _game(env_id) == _game(str(defaults.get("env_id", "")))
    return ResolvedEnv(ATARI_TYPE, observation_space, action_space, None if same_game else math.inf, {})


def _game(env_id: str) -> str:
    return re.sub(r"(NoFrameskip|Deterministic)?-v\d+$", "", env_id.split("/")[-1]).lower()


def _misfit(algo: str, observation_space: gym.Space, action_space: gym.Space) -> Optional[str]:
    """None when ``algo``'s policy builds on these spaces, else its reason (the policy's own check)."""
    policy_cls = POLICY_REGISTRY.get(algo)
    cfg = EasyDict(dict(policy_cls.default_config(), type=algo))
    try:
        policy_cls(cfg, observation_space, action_space, device="cpu")
    except (SpaceMismatchError, ValueError) as err:
        return str(err)
    return None
