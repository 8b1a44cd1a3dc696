"""``baton record``: a dataset from a trained checkpoint.

    baton record -c CONFIG --ckpt RUN/ckpt/best.pth.tar --episodes N --dataset NAME [--eps E] [--seed S]
                 [--root DIR] [--num-envs K] [--overwrite] [KEY=VALUE ...]

The config names the env and the policy that wrote the checkpoint (the one it was trained with). The
checkpoint is read with ``torch.load(weights_only=True)``: nothing in it runs. The policy acts greedily
(its eval mode); with ``--eps E`` each action is, with probability E, a uniformly random one instead (for
discrete and continuous actions alike). Episodes run on ``--num-envs`` envs in gymnasium's SAME_STEP
autoreset mode, env i reset with ``seed + i``; each finished episode keeps its real final observation and
its ``terminated`` and ``truncated`` flags apart. The first N episodes to finish (ordered by the step they
finished at, then by env) are written as Minari dataset NAME (``data.offline.write_dataset``), so the same
command and seed give the same dataset.

A Dict or Tuple observation (nested too; a legal-action mask makes one, ``policies.masks``) is recorded leaf by
leaf, each in its own dtype (an image stays uint8), in Minari's layout; with ``--eps`` the random action of an
observation that carries a mask is a legal one. Only an observation with a leaf no array holds (a ``Text``,
``Graph``, ``Sequence``) is refused, naming the key (``data.offline.check_storable``).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch

from data.env_loop import EnvLoop
from data.envs import make_vector_env
from data.obs import Obs, cat_numpy, map_leaves, to_plain
from data.offline import Episode, check_storable, write_dataset
from engine.config import compile_config
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from pipelines.stages import env_params
from middleware.checkpoint import CheckpointError, check_policy_type, load_checkpoint
from policies.masks import action_mask, random_legal

__all__ = ["record_dataset", "EpsGreedy"]

logger = logging.getLogger(__name__)


class EpsGreedy:
    """An eval mode acting at random with probability ``eps`` per env (a uniform draw from ``action_space``).

    Args:
        policy: anything with ``forward(obs) -> {"action": ...}`` (``policy.eval_mode``).
        action_space: the single env's action space (Discrete or Box).
        eps: probability of a random action.
        seed: seeds the draws.
    """

    def __init__(self, policy: Any, action_space: gym.Space, eps: float, seed: int) -> None:
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"--eps must lie in [0, 1], got {eps}")
        self._policy = policy
        self._space = action_space
        self._eps = float(eps)
        self._rng = np.random.default_rng(seed)
        #: a recurrent policy's (``ppo_lstm``): the env loop then carries its memory through this wrapper
        self.initial_state = getattr(policy, "initial_state", None)

    def forward(self, obs: Obs, **kwargs: Any) -> Dict[str, Any]:
        """The policy's greedy action, replaced at random with probability ``eps`` (by a legal one, where ``obs``
        carries a mask); ``kwargs`` (a recurrent policy's ``state``) go to the policy, and what it returns besides
        the action (its ``next_state``) comes back with it."""
        out = self._policy.forward(obs, **kwargs)
        action = out["action"].numpy(force=True)
        if self._eps > 0:
            explore = self._rng.random(len(action)) < self._eps
            if explore.any():
                if isinstance(self._space, gym.spaces.Discrete):
                    random_action = self._random_discrete(len(action), action_mask(obs))
                else:
                    random_action = self._rng.uniform(self._space.low, self._space.high,
                                                      (len(action),) + tuple(self._space.shape))
                mask = explore.reshape((-1,) + (1,) * (action.ndim - 1))
                action = np.where(mask, random_action.astype(action.dtype), action)
        return {**out, "action": torch.from_numpy(action)}

    def _random_discrete(self, rows: int, mask: Optional[torch.Tensor]) -> np.ndarray:
        """A uniformly random action per row: among all actions, or among each row's legal ones (a row with
        none legal: among all, as ``policies.masks`` treats it)."""
        if mask is None:
            return self._rng.integers(0, int(self._space.n), rows)
        u = torch.from_numpy(self._rng.random(rows))  # this recorder's draws, as policies.masks takes them
        return random_legal(u, mask.cpu()).numpy()


def record_dataset(input_cfg: Tuple[Mapping[str, Any], Mapping[str, Any]], ckpt: str, episodes: int, dataset: str,
                   *, eps: float = 0.0, seed: int = 0, root: Optional[str] = None, num_envs: int = 8,
                   overwrite: bool = False) -> Dict[str, Any]:
    """Record ``episodes`` episodes of the checkpoint's policy as dataset ``dataset`` (module docstring).

    Returns:
        ``{"dataset", "path", "episodes", "transitions", "return_mean", "return_std", "return_min",
        "return_max", "terminated", "truncated"}`` (the last two: episodes that ended each way).

    Raises:
        CheckpointError: the checkpoint is missing, unsafe, or was written by another policy.
        ValueError: a count below 1.
        data.offline.DatasetError: the dataset exists (without ``overwrite``), or the env's observation has a leaf
            no dataset stores (``data.offline.check_storable``).
    """
    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    if num_envs < 1:
        raise ValueError(f"--num-envs must be >= 1, got {num_envs}")
    cfg = compile_config(input_cfg[0], input_cfg[1], seed=seed, save=False)
    state = load_checkpoint(ckpt)
    check_policy_type(state, ckpt, cfg.policy.type, f"the config {cfg.exp_name!r}", "record with the config it was "
                      "trained with")
    env_type = ENV_REGISTRY.get(cfg.env.type)
    env = make_vector_env(env_type, cfg.env, num_envs, seed, manager="sync", training=False)
    try:
        _check_recordable(env.single_observation_space, env_params(cfg).env_id)
        policy = POLICY_REGISTRY.get(cfg.policy.type)(cfg.policy, env.single_observation_space,
                                                       env.single_action_space)
        try:
            policy.learn_mode.load_state_dict(state["policy"])
        except (KeyError, RuntimeError, ValueError) as err:
            raise CheckpointError(f"{ckpt} does not fit the model of this config ({str(err).splitlines()[0]}): "
                                  f"record with the config it was trained with") from err
        actor = EpsGreedy(policy.eval_mode, env.single_action_space, eps, seed)
        recorded = _run_episodes(EnvLoop(actor, env, seed), episodes)
    finally:
        env.close()
    returns = np.array([float(np.sum(e.rewards)) for e in recorded])
    path = write_dataset(dataset, recorded, env.single_observation_space, env.single_action_space, root=root,
                         env_id=env_params(cfg).env_id, overwrite=overwrite, metadata={
                             "algorithm_name": f"{cfg.policy.type} checkpoint, eps-greedy eps={eps}",
                             "description": f"{episodes} episodes of {ckpt} on {env_params(cfg).env_id} (seed "
                                            f"{seed}, {num_envs} envs), recorded by baton record"})
    report = {"dataset": dataset, "path": path, "episodes": len(recorded),
              "transitions": int(sum(len(e) for e in recorded)), "return_mean": float(returns.mean()),
              "return_std": float(returns.std()), "return_min": float(returns.min()),
              "return_max": float(returns.max()),
              "terminated": int(sum(bool(e.terminations[-1]) for e in recorded)),
              "truncated": int(sum(bool(e.truncations[-1]) for e in recorded))}
    logger.info("recorded %s", report)
    return report


def _check_recordable(observation_space: gym.Space, env_id: str) -> None:
    """Refuse, before an episode is played, an env whose observation has a leaf no dataset stores as rows of an
    array (a ``Text``, ``Graph`` or ``Sequence`` key), naming its key path and the fix (``check_storable``)."""
    check_storable(observation_space, f"env {env_id}")


def _run_episodes(loop: EnvLoop, n_episodes: int) -> List[Episode]:
    """The first ``n_episodes`` episodes to finish on ``loop``'s envs, each with its real final
    observation and its own ``terminated``/``truncated`` flags; a dictionary observation is gathered leaf by
    leaf (nested dicts of arrays, a Tuple's items under "0", "1", ...: ``write_dataset`` nests them as the
    space)."""
    num_envs = loop.num_envs
    columns: List[Dict[str, list]] = [_new_column() for _ in range(num_envs)]
    done: List[Episode] = []
    loop.reset()
    while len(done) < n_episodes:
        step = loop.step()
        obs, next_obs = _host(step.obs), _host(step.next_obs)
        action, reward, terminated, truncated = (value.numpy(force=True) for value in (
            step.action, step.reward, step.terminated, step.truncated))
        for i in range(num_envs):
            col = columns[i]
            col["obs"].append(_row(obs, i))
            col["action"].append(action[i])
            col["reward"].append(float(reward[i]))
            col["terminated"].append(bool(terminated[i]))
            col["truncated"].append(bool(truncated[i]))
        for i in step.ended_envs():  # ascending env index: a deterministic order
            col = columns[i]
            done.append(Episode(observations=cat_numpy(col["obs"] + [_row(next_obs, i)]),
                                actions=np.stack(col["action"]),
                                rewards=np.asarray(col["reward"], dtype=np.float32),
                                terminations=np.asarray(col["terminated"], dtype=bool),
                                truncations=np.asarray(col["truncated"], dtype=bool)))
            columns[i] = _new_column()
    return done[:n_episodes]


def _host(value: Obs) -> Any:
    """An observation batch as numpy on the host: one array, or nested dicts of arrays for a tree."""
    return map_leaves(lambda leaf: leaf.numpy(force=True), to_plain(value))


def _row(value: Any, i: int) -> Any:
    """Env ``i``'s row of a host observation batch, kept as a batch of one (every leaf ``[1, ...]``), so an
    episode's rows are one ``cat_numpy`` away from its observations."""
    return map_leaves(lambda leaf: leaf[i:i + 1], value)


def _new_column() -> Dict[str, list]:
    return {"obs": [], "action": [], "reward": [], "terminated": [], "truncated": []}


def add_record_options(parser: Any) -> Any:
    """The options of ``baton record`` (module docstring)."""
    parser.add_argument("-c", "--config", required=True, help="the config the checkpoint was trained with")
    parser.add_argument("--ckpt", required=True, help="the checkpoint, e.g. RUN/ckpt/best.pth.tar")
    parser.add_argument("--episodes", type=int, required=True, help="episodes to record")
    parser.add_argument("--dataset", required=True, help="the Minari dataset id to write, e.g. cartpole/expert-v0")
    parser.add_argument("--eps", type=float, default=0.0, help="probability of a uniformly random action (default 0: "
                                                               "greedy)")
    parser.add_argument("-s", "--seed", type=int, default=0, help="env i is reset with seed + i; seeds --eps draws")
    parser.add_argument("--root", default=None, help="the dataset root (default: $MINARI_DATASETS_PATH, else "
                                                     "~/.minari/datasets)")
    parser.add_argument("--num-envs", type=int, default=8, help="envs stepped together (default 8)")
    parser.add_argument("--overwrite", action="store_true", help="replace a dataset of the same name")
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE", help="set config keys")
    return parser


def record_main(input_cfg: Tuple[Mapping[str, Any], Mapping[str, Any]], args: Any) -> int:
    """``baton record``: one line with what was written, or one line saying what to fix (status 2)."""
    import sys

    from data.offline import DatasetError

    try:
        report = record_dataset(input_cfg, args.ckpt, args.episodes, args.dataset, eps=args.eps, seed=args.seed,
                                root=args.root, num_envs=args.num_envs, overwrite=args.overwrite)
    except (CheckpointError, DatasetError, ValueError) as err:
        print(f"baton: {err}", file=sys.stderr, flush=True)
        return 2
    print(f"baton: recorded {report['dataset']}: {report['episodes']} episodes, {report['transitions']} transitions, "
          f"return {report['return_mean']:.1f} +- {report['return_std']:.1f} (min {report['return_min']:.1f}, max "
          f"{report['return_max']:.1f}), {report['terminated']} terminated, {report['truncated']} truncated; "
          f"{report['path']}", flush=True)
    return 0
