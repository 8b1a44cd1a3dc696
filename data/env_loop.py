"""The one env-stepping loop, on tensors: the collector and the evaluator step every kind of env through it.

Envs, as the loop sees them (``port``): a gymnasium vector env (numpy) yields host tensors (``torch.from_numpy``,
no copy) and takes each step's action as one ``.numpy(force=True)``; a batched torch env (``data.torch_env``)
yields tensors on its device and takes the action as it is, so nothing goes to the host. Both run in
gymnasium's SAME_STEP autoreset mode. The policy (a collect or eval mode) sees a tensor and answers with tensors.
A dictionary observation (gymnasium ``Dict``/``Tuple`` spaces: a dict of batched arrays, and ``final_obs`` one
dict per env) reaches the policy, and every step, as a DI-treetensor tree of such tensors (``data.obs``).

One loop step, for every env at once:

1. act: ``policy.forward(obs, **policy_kwargs)`` on the current observations (one row per env), and send its
   ``action`` to the envs;
2. receive the step: where an episode ended (terminated or truncated), the reset observation becomes the
   current one and the real final observation (``info["final_obs"]``) is the step's ``next_obs``;
3. observe: a recurrent policy's memory is zeroed where an episode ended; the step's rewards and ends join
   the episode tally.

Episode returns and lengths are not counted step by step: ``finished()`` computes them for all steps since its
last call at once, from each env's running return and length, as tensors on the envs' device (the collector
reads them once per call; on a device env no step reads anything back to the host).

With env groups (``data.env_groups.EnvGroups``, ``env.manager.overlap``) the loop runs one lane per group and
the policy acts on one group while the others step. With groups A and B, one call of ``run(T)``::

    prime    act(A) send(A)      act(B) send(B)                  B's forward runs while A steps
    t < T-1  recv(A) observe(A)  act(A) send(A)                  A's forward (for t+1) while B steps
             recv(B) observe(B)  act(B) send(B)                  B's forward (for t+1) while A steps
             yield step t of every env (A's rows, then B's)
    t = T-1  recv(A) observe(A)  recv(B) observe(B)  yield       nothing is sent: no env step is in flight
                                                                 between calls, so a policy updated in
                                                                 between acts on every step after it

One vector env is the same schedule with a single lane, whose send keeps the action and whose receive steps
the env. Every env sees the actions the serial loop would give it for the same observations, and each step
has the serial layout (env ``i`` in row ``i``), so chunks, n-step windows and GAE streams are the serial
loop's. A policy that draws random numbers draws them for each group's rows, so its random choices differ.

A recurrent policy (its mode has ``initial_state(num_envs)``, e.g. ``ppo_lstm``) keeps its memory in the loop,
one row per env and one memory per lane: ``act`` passes it as ``forward(obs, state=...)`` and keeps the
forward's ``next_state``, zeroed where an episode ended (the next observation is the new episode's first).
Observations go through ``data.obs`` only, so a tree of tensors can take a tensor's place.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from engine.protocols import CollectPolicy, EvalPolicy, VectorEnv

from .env_groups import EnvGroups
from .obs import cat, replace_rows, to_tensor
from .torch_env import TorchVectorEnv

__all__ = ["EnvLoop", "EnvStep", "Finished"]

_NO_KWARGS: Mapping[str, Any] = {}


class EnvStep(NamedTuple):
    """What one loop step produced: tensors with one row per env, on the envs' device (the host for gymnasium
    envs), but ``out``, which is on the policy's; its ``action`` is the envs' host copy where a policy on a device
    acts for gymnasium envs (read back once, for the envs)."""

    obs: Any                   # the observations the policy acted on
    out: dict                  # everything the policy returned (``action``, and ``logp``/``value``, ...)
    next_obs: Any              # the real next observations (the final one where an episode ended)
    reward: torch.Tensor       # the env's dtype
    terminated: torch.Tensor
    truncated: torch.Tensor
    #: whether an episode ended in this step, where the host knows it without a read (gymnasium envs); None
    #: where knowing it would read a device's tensors back
    any_ended: Optional[bool] = None
    #: int8 per env: 1 where an episode ended and its env said it met its goal (``info["is_success"]`` of the
    #: episode's last step, gymnasium-robotics' convention), 0 where it said it did not, -1 where nothing was said
    #: (no end, or no ``is_success``); None where no env said anything in this step
    success: Optional[torch.Tensor] = None

    @property
    def action(self) -> torch.Tensor:
        """The action sent to the envs."""
        return self.out["action"]

    @property
    def ended(self) -> torch.Tensor:
        """Where an episode ended: terminated or truncated."""
        return self.terminated | self.truncated

    def has_ended(self) -> bool:
        """Whether an episode ended in this step (a read back to the host where the envs are on a device)."""
        return self.any_ended if self.any_ended is not None else bool(self.ended.any())

    def ended_envs(self) -> List[int]:
        """The envs whose episode ended in this step, ascending (a read back to the host)."""
        return torch.nonzero(self.ended).flatten().tolist() if self.has_ended() else []


class Finished(NamedTuple):
    """Episodes that ended, ordered by step and then env: each one's env, return and length in env steps. Where
    each env holds several agents (``data.parallel_envs``), ``returns`` is the mean of the agents' returns (the
    field's per-agent unit) and ``agent_returns`` each agent's, ``[episodes, agents]``."""

    envs: torch.Tensor     # int64
    returns: torch.Tensor  # float64
    lengths: torch.Tensor  # int64
    agent_returns: Optional[torch.Tensor] = None  # float64 [episodes, agents]; None: one agent per env


class _Tally:
    """Each env's running episode return and length, brought up to date for many steps at once (``settle``)."""

    SETTLE_EVERY = 256  # pending steps settled without being asked, so that an unread loop stays bounded

    def __init__(self) -> None:
        self._return: Optional[torch.Tensor] = None   # float64 [E]: return of each env's episode so far
        self._length: Optional[torch.Tensor] = None   # int64 [E]
        self._steps: List[EnvStep] = []  # not settled yet
        self._finished: List[Finished] = []
        self._columns: dict = {}  # (steps, device) -> [steps, 1] step indices
        self._none_ended: Optional[Finished] = None

    def reset(self) -> None:
        self._return = self._length = None
        self._steps, self._finished = [], []

    def add(self, step: "EnvStep") -> None:
        self._steps.append(step)
        if len(self._steps) >= self.SETTLE_EVERY:
            self._settle()

    def take(self) -> Finished:
        """The episodes that ended since the last call."""
        self._settle()
        parts, self._finished = self._finished, []
        if len(parts) == 1:
            return parts[0]
        if not parts:  # none ended: the usual answer, made once
            if self._none_ended is None:
                empty = torch.empty(0, dtype=torch.int64)
                self._none_ended = Finished(empty, empty.double(), empty)
            return self._none_ended
        return Finished(*(None if field[0] is None else torch.cat(field) for field in zip(*parts)))

    def _settle(self) -> None:
        """Returns and lengths at every pending step, by cumulative sums that restart after each episode end."""
        pending, self._steps = self._steps, []
        if not pending:
            return
        if self._return is not None and not any(s.any_ended is not False for s in pending):  # no end, known so
            if len(pending) == 1:  # a collect of one step (an off-policy loop's): no stack, no sum
                self._return = self._return + pending[0].reward
            else:
                self._return = self._return + torch.stack([s.reward for s in pending]).sum(0, dtype=torch.float64)
            self._length = self._length + len(pending)
            return
        reward = torch.stack([s.reward for s in pending])  # [K, E]
        ended = torch.stack([s.terminated for s in pending]).logical_or_(torch.stack([s.truncated for s in pending]))
        if self._return is None:
            self._return = torch.zeros(reward.shape[1:], dtype=torch.float64, device=reward.device)
            self._length = torch.zeros(reward.shape[1], dtype=torch.int64, device=reward.device)
        k = self._steps_column(len(pending), reward.device)                     # [K, 1]: 0, 1, ...
        agents = reward.shape[2:]  # several agents per env (data.parallel_envs): a return per agent
        cum = reward.cumsum(0, dtype=torch.float64).add_(self._return)         # as if no episode had ended
        last_end = torch.where(ended, k, -1).cummax(0).values                  # the last end at or before step k
        prev_end = F.pad(last_end[:-1], (0, 0, 1, 0), value=-1)                # ... before step k (-1: none)
        start = (prev_end + 1).reshape(prev_end.shape + (1,) * len(agents)).expand(cum.shape)
        padded = torch.cat([torch.zeros_like(cum[:1]), cum])                   # cum before step 0 is 0
        returns = cum - padded.gather(0, start)                                # less what the episodes before had
        lengths = (k - prev_end).add_(self._length * (prev_end < 0))           # the carried length until an end
        self._return = returns[-1].masked_fill(ended[-1].reshape(ended.shape[1:] + (1,) * len(agents)), 0.0)
        self._length = lengths[-1].masked_fill(ended[-1], 0)
        ended_returns = returns[ended]
        if agents:
            self._finished.append(Finished(ended.nonzero()[:, 1], ended_returns.flatten(1).mean(1), lengths[ended],
                                           ended_returns))
        else:
            self._finished.append(Finished(ended.nonzero()[:, 1], ended_returns, lengths[ended]))

    def _steps_column(self, steps: int, device: torch.device) -> torch.Tensor:
        key = (steps, device)
        column = self._columns.get(key)
        if column is None:
            column = self._columns[key] = torch.arange(steps, device=device).unsqueeze(1)
        return column


class _HostPort:
    """A gymnasium vector env (numpy), or one group of ``EnvGroups``, as the loop sees envs: host tensors that
    share the env's arrays (gymnasium's vector envs return new arrays each step: they copy by default, ale-py's
    allocates them). ``send`` starts a step (or keeps the action until ``recv``), ``recv`` finishes it."""

    def __init__(self, env: VectorEnv, send: Optional[Callable[[np.ndarray], None]] = None,
                 recv: Optional[Callable[[], Tuple]] = None) -> None:
        mode = (getattr(env, "metadata", None) or {}).get("autoreset_mode")
        if mode is not None and getattr(mode, "name", str(mode)) != "SAME_STEP":
            raise ValueError(f"the env loop steps vector envs in gymnasium's SAME_STEP autoreset mode, got {mode}: "
                             f"build them with data.envs.make_vector_env, or pass autoreset_mode=AutoresetMode."
                             f"SAME_STEP (their real final observations come in info['final_obs'])")
        self.env = env
        self._send, self._recv = send, recv
        self._action: Optional[np.ndarray] = None

    def reset(self, seeds: List[int]) -> Any:
        return to_tensor(self.env.reset(seed=seeds)[0])

    def send(self, action: torch.Tensor) -> Optional[torch.Tensor]:
        """Send ``action`` to the envs; returns it on the host where it came from a device (the one copy, a wait,
        which the transition then keeps rather than copying it back once more), else None."""
        # a CPU tensor's memory as it is; one copy (a wait) from a device where the policy acts on one
        moved = not action.is_cpu
        action = action.numpy(force=moved or action.requires_grad)
        if self._send is None:
            self._action = action
        else:
            self._send(action)
        return torch.from_numpy(action) if moved else None

    def recv(self) -> Tuple[Any, Any, torch.Tensor, torch.Tensor, torch.Tensor, Optional[bool],
                            Optional[torch.Tensor]]:
        """``(obs, next_obs, reward, terminated, truncated, any_ended, success)``: ``next_obs`` holds the real final
        observations where an episode ended, ``success`` the ended episodes' ``is_success`` (``EnvStep``)."""
        if self._recv is None:
            action, self._action = self._action, None
            obs, reward, terminated, truncated, info = self.env.step(action)
        else:
            obs, reward, terminated, truncated, info = self._recv()
        obs_t = next_obs = to_tensor(obs)
        any_ended, success = False, None
        final = info.get("final_obs")  # SAME_STEP adds it in the steps where an episode ended, and only there
        if final is not None:
            rows = np.flatnonzero(terminated | truncated)
            any_ended = len(rows) > 0
            if any_ended:
                next_obs = to_tensor(replace_rows(obs, rows, [final[i] for i in rows]))
                success = _success(info.get("final_info"), len(terminated))
        # gymnasium's rewards and flags are numpy arrays
        return (obs_t, next_obs, torch.from_numpy(reward), torch.from_numpy(terminated), torch.from_numpy(truncated),
                any_ended, success)


def _success(final_info: Any, num_envs: int) -> Optional[torch.Tensor]:
    """``EnvStep.success`` from a SAME_STEP step's ``final_info`` (gymnasium's vector info: the values and an
    ``_is_success`` mask of the envs that gave one); None where no env gave one."""
    if not final_info or "is_success" not in final_info:
        return None
    given = np.asarray(final_info.get("_is_success", np.ones(num_envs, bool)), dtype=bool)
    met = np.asarray(final_info["is_success"]).astype(bool)
    return torch.from_numpy(np.where(given, met.astype(np.int8), np.int8(-1)).astype(np.int8))


class _DevicePort:
    """A batched torch env (``data.torch_env``): tensors on its device, the action sent as a tensor, and the
    real final observations of every env in ``info["final_obs"]``; nothing is read back to the host."""

    def __init__(self, env: TorchVectorEnv) -> None:
        self.env = env
        self._action: Optional[torch.Tensor] = None

    def reset(self, seeds: List[int]) -> Any:
        return self.env.reset(seed=seeds)[0]

    def send(self, action: torch.Tensor) -> None:
        self._action = action
        return None

    def recv(self) -> Tuple[Any, Any, torch.Tensor, torch.Tensor, torch.Tensor, Optional[bool], None]:
        action, self._action = self._action, None
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, info["final_obs"], reward, terminated, truncated, None, None  # whether any ended: not read


def _port(env: VectorEnv) -> Union[_HostPort, _DevicePort]:
    return _DevicePort(env) if isinstance(env, TorchVectorEnv) else _HostPort(env)


class _Lane:
    """Envs the loop steps as a unit (the whole vector env, or one env group): their port, their current
    observations and a recurrent policy's memory of them."""

    def __init__(self, policy: Any, port: Union[_HostPort, _DevicePort], num_envs: int, offset: int) -> None:
        self.policy, self.port, self.num_envs, self.offset = policy, port, num_envs, offset
        initial_state = getattr(policy, "initial_state", None)
        self._initial_state = initial_state if callable(initial_state) else None
        self.obs: Any = None
        self.state: Any = None  # a recurrent policy's memory, one row per env (None: a feed-forward policy)
        self._checked = False

    def reset(self, seed: int) -> None:
        self.obs = self.port.reset([seed + self.offset + i for i in range(self.num_envs)])
        if self._initial_state is not None:
            self.state = self._initial_state(self.num_envs)

    def act(self, policy_kwargs: Mapping[str, Any]) -> Tuple[Any, dict]:
        """The policy's forward on the current observations, whose action is sent to the envs."""
        obs = self.obs
        if self._initial_state is None:
            out = self.policy.forward(obs, **policy_kwargs)
        else:
            out = self.policy.forward(obs, state=self.state, **policy_kwargs)
        if not self._checked:
            _check_outputs(self.policy, out)
            self._checked = True
        on_host = self.port.send(out["action"])
        if on_host is not None:  # the envs' copy of a device action: the transition's too (no second read)
            out = {**out, "action": on_host}
        return obs, out

    def observe(self, obs: Any, out: dict) -> EnvStep:
        """The step ``act`` sent, received: the next observations become current, the memory restarts where
        an episode ended."""
        self.obs, next_obs, reward, terminated, truncated, any_ended, success = self.port.recv()
        if self._initial_state is not None:
            self.state = out["next_state"]
            if any_ended is not False:  # zeroed where an episode ended (unless the host knows none did)
                ended = (terminated | truncated).to(self.state.device)
                self.state = self.state.masked_fill(ended.reshape((-1,) + (1,) * (self.state.dim() - 1)), 0)
        return EnvStep(obs, out, next_obs, reward, terminated, truncated, any_ended, success)


def _check_outputs(policy: Any, out: Mapping[str, Any]) -> None:
    """A forward answers a tensor with tensors (``policies.base``); said once, at a lane's first step."""
    for key, value in out.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"the forward of {type(getattr(policy, 'policy', policy)).__name__} returned {key!r} as "
                            f"{type(value).__name__}: the env loop needs a policy whose forward answers a tensor "
                            f"with tensors (every baton policy's collect and eval modes do)")


def _merge(parts: Sequence[EnvStep]) -> EnvStep:
    """The lanes' steps as one step of all envs, in env order (what one vector env gives)."""
    if len(parts) == 1:
        return parts[0]
    out = {key: cat([p.out[key] for p in parts]) for key in parts[0].out}
    known = [p.any_ended for p in parts]
    success = None
    if any(p.success is not None for p in parts):  # a lane that said nothing: -1 in its rows
        success = torch.cat([p.success if p.success is not None else torch.full((len(p.reward),), -1, dtype=torch.int8)
                             for p in parts])
    return EnvStep(cat([p.obs for p in parts]), out, *(cat([p[i] for p in parts]) for i in range(2, 6)),
                   None if None in known else any(known), success)


class EnvLoop:
    """Steps ``env`` with ``policy``: the current observations, episode statistics and a recurrent memory.

    Args:
        policy: anything with ``forward(obs, **kwargs) -> {"action": ..., ...}`` on tensors (a collect or eval
            mode).
        env: a vector env in SAME_STEP autoreset mode: gymnasium's (``data.envs.make_vector_env``), env groups
            or a batched torch env (``data.torch_env``).
        seed: env i is reset with ``seed + i`` the first time (``reset`` can pass other seeds).
        overlap: step env groups while the policy acts on another group (module docstring); default: whenever
            ``env`` is ``EnvGroups``.

    Raises:
        ValueError: ``overlap`` for envs that are not in groups.
    """

    def __init__(self, policy: Union[CollectPolicy, EvalPolicy], env: VectorEnv, seed: int = 0, *,
                 overlap: Optional[bool] = None) -> None:
        grouped = isinstance(env, EnvGroups)
        if overlap and not grouped:
            raise ValueError(f"an overlapped env loop needs its envs in groups, got {type(env).__name__}: build them "
                             f"with data.envs.make_vector_env(..., groups=2) (config: env.manager.overlap=True)")
        self.policy = policy
        self.env = env
        self.num_envs = env.num_envs
        self.seed = seed
        self.overlap = grouped if overlap is None else bool(overlap)
        if self.overlap:
            self._lanes = [_Lane(policy, _HostPort(group, lambda a, g=g: env.send(g, a), lambda g=g: env.recv(g)),
                                 size, offset) for g, (group, size, offset) in
                           enumerate(zip(env.groups, env.sizes, env.offsets))]
        else:
            self._lanes = [_Lane(policy, _port(env), self.num_envs, 0)]
        self._tally = _Tally()
        self._started = False

    @property
    def obs(self) -> Any:
        """The observations the next step acts on (None before the first reset)."""
        if not self._started:
            return None
        return _merge_rows([lane.obs for lane in self._lanes])

    def reset(self, seed: Optional[int] = None) -> Any:
        """Reset every env (env i with ``seed + i``; default the loop's seed) and restart its episode."""
        seed = self.seed if seed is None else seed
        for lane in self._lanes:
            lane.reset(seed)
        self._tally.reset()
        self._started = True
        return self.obs

    def current_obs(self) -> Any:
        """The observations the next step acts on (the envs are reset on first use)."""
        return self.obs if self._started else self.reset()

    def step(self, policy_kwargs: Mapping[str, Any] = _NO_KWARGS) -> EnvStep:
        """One step of every env; ``policy_kwargs`` go to ``policy.forward`` (e.g. ``{"eps": 0.1}``)."""
        return next(self.run(1, policy_kwargs))

    def run(self, steps: int, policy_kwargs: Mapping[str, Any] = _NO_KWARGS) -> Iterator[EnvStep]:
        """``steps`` steps of every env (module docstring); between calls no env step is in flight. If the
        caller stops early, the steps in flight are finished and observed (the envs and the loop stay in
        agreement) but not yielded."""
        if steps <= 0:
            return
        self.current_obs()
        lanes, tally = self._lanes, self._tally
        acted: List[Optional[Tuple[Any, dict]]] = [None] * len(lanes)
        try:
            for g, lane in enumerate(lanes):  # prime: each lane's first action; the lanes sent before it step
                acted[g] = lane.act(policy_kwargs)
            for t in range(steps):
                last = t + 1 == steps
                parts = []
                for g, lane in enumerate(lanes):
                    obs, out = acted[g]
                    acted[g] = None
                    parts.append(lane.observe(obs, out))
                    if not last:  # this lane's next action, while the other lanes step
                        acted[g] = lane.act(policy_kwargs)
                step = _merge(parts)
                tally.add(step)
                yield step
        except GeneratorExit:
            if acted[0] is not None:  # every lane is in flight at a yield, or none is
                step = _merge([lane.observe(*acted[g]) for g, lane in enumerate(lanes)])
                tally.add(step)
            raise

    def finished(self) -> Finished:
        """The episodes that ended in the steps since the last call (or the last reset): env, return, length,
        as tensors on the envs' device (reading them is the caller's one read back to the host)."""
        return self._tally.take()


def _merge_rows(values: List[Any]) -> Any:
    return values[0] if len(values) == 1 else cat(values)
