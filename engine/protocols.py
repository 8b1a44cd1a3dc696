"""The contracts between the floors: what a middleware may use of a policy, an env and a replay buffer.

They live in the core so that ``middleware/`` can be typed against a policy without importing
``policies/`` (and the other way round): a policy's ``learn_mode`` is a ``LearnPolicy`` because it has the
members below, not because it inherits from anything (``typing.Protocol``, structural typing).

``require(obj, Protocol, "what")`` checks an argument at construction time and names the missing members,
so a wrong object fails where it is passed, not deep inside the first iteration.

Importing this module loads no torch: tensors and modules are annotated by name only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: `import engine` stays free of torch and numpy
    import torch

__all__ = ["Batch", "ModelOwner", "LearnPolicy", "CollectPolicy", "ValuePolicy", "EvalPolicy", "VectorEnv", "EnvType",
           "Storage", "ReplayBuffer", "Saveable", "Stateful", "require"]

#: A batch of transitions: a ``treetensor.torch.Tensor`` whose fields (``obs``, ``action``, ``reward``,
#: ...) share their leading dimension. Built by ``data.batch.make_batch``; named here for annotations.
Batch = Any


@runtime_checkable
class Saveable(Protocol):
    """Anything a checkpoint can be written from."""

    def state_dict(self) -> Dict[str, Any]: ...


@runtime_checkable
class Stateful(Saveable, Protocol):
    """Anything a checkpoint can be written from and restored into."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class ModelOwner(Stateful, Protocol):
    """A stateful object whose ``model`` is the module that takes gradients: what the ddp middleware wraps
    (it assigns a ``DistributedDataParallel`` wrapper to ``model``) and synchronises (``state_dict``)."""

    model: "torch.nn.Module"


@runtime_checkable
class LearnPolicy(ModelOwner, Protocol):
    """``policy.learn_mode``: one update per ``forward(batch)``.

    ``model`` is the module that takes gradients; ``state_dict`` covers everything an update changes
    (model, target model, optimizer, counters). Optional: ``graphed_updates(buffer, batch_size, updates,
    priority)``, an object whose ``run()`` makes ``updates`` updates on samples of ``buffer`` in one CUDA graph
    (``policies.update_graph``), or None where they are not captured; an off-policy learner uses it when given.
    """

    def forward(self, batch: Batch) -> Dict[str, Any]: ...


@runtime_checkable
class CollectPolicy(Protocol):
    """``policy.collect_mode``: acts for data collection.

    ``forward(obs, **collect_kwargs)`` takes a batch of observations (a tensor, one row per env: on the host for
    gymnasium envs, on the envs' device for batched torch envs) and returns tensors: at least ``action``;
    on-policy algorithms add ``logp`` and ``value``. A recurrent policy's mode also has
    ``initial_state(num_envs)``; its forward then takes ``state=`` (each env's memory) and returns
    ``next_state``, which the env loop carries (``data.env_loop``).
    """

    def forward(self, obs: "torch.Tensor", **kwargs: Any) -> Dict[str, Any]: ...


@runtime_checkable
class ValuePolicy(CollectPolicy, Protocol):
    """A collect mode that also estimates state values (actor-critic algorithms), for GAE: ``value(obs)``
    is a tensor of one value per row, or None for value-free algorithms."""

    value: Optional[Callable[[Any], "torch.Tensor"]]


@runtime_checkable
class EvalPolicy(Protocol):
    """``policy.eval_mode``: acts greedily for evaluation; ``forward(obs)`` takes a tensor, as the collect mode
    does, and returns ``action`` as a tensor."""

    def forward(self, obs: "torch.Tensor") -> Dict[str, Any]: ...


@runtime_checkable
class VectorEnv(Protocol):
    """A vector env in ``SAME_STEP`` autoreset mode: when an episode ends, ``step`` returns the reset observation
    in ``obs`` and the real last one in ``info["final_obs"]``. Gymnasium's (numpy) or a batched torch env's
    (tensors on its device, ``data.torch_env``): the env loop (``data.env_loop``) steps either."""

    num_envs: int
    single_observation_space: Any
    single_action_space: Any

    def reset(self, *, seed: Any = None, options: Any = None) -> Any: ...

    def step(self, actions: Any) -> Any: ...

    def close(self) -> None: ...


@runtime_checkable
class EnvType(Protocol):
    """A registered env ``type`` (``create_config.env.type``): its config defaults, and either
    ``make(env_cfg)`` for one gymnasium env or ``make_vector(env_cfg, num_envs, seed, training)``."""

    def default_config(self) -> Dict[str, Any]: ...


@runtime_checkable
class Storage(Protocol):
    """Where a replay buffer keeps transitions: ``extend`` writes a batch and returns the slots it used;
    ``gather`` reads slots back as a dict of tensors."""

    capacity: int

    def __len__(self) -> int: ...

    def extend(self, batch: Batch) -> "torch.Tensor": ...

    def gather(self, idx: "torch.Tensor") -> Dict[str, "torch.Tensor"]: ...

    def state_dict(self) -> Dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class ReplayBuffer(Protocol):
    """What the pusher and the off-policy learner use of a replay buffer."""

    capacity: int

    def __len__(self) -> int: ...

    def push(self, batch: Batch) -> None: ...

    def sample(self, batch_size: int) -> Batch: ...

    def update_priority(self, idx: "torch.Tensor", priority: "torch.Tensor") -> None: ...

    def state_dict(self) -> Dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


def require(obj: Any, protocol: type, what: str) -> Any:
    """Return ``obj`` if it has every member of ``protocol``.

    Raises:
        TypeError: naming ``what``, the protocol and the members ``obj`` lacks.

    Examples:
        >>> require(object(), EvalPolicy, "the evaluator's policy")
        Traceback (most recent call last):
        ...
        TypeError: the evaluator's policy must be an EvalPolicy (e.g. policy.eval_mode); object lacks: forward
    """
    if isinstance(obj, protocol):
        return obj
    members = sorted(name for name in _protocol_members(protocol) if not hasattr(obj, name))
    hint = {"LearnPolicy": "policy.learn_mode", "CollectPolicy": "policy.collect_mode",
            "ValuePolicy": "policy.collect_mode of an actor-critic", "EvalPolicy": "policy.eval_mode"}.get(
        protocol.__name__)
    raise TypeError(f"{what} must be a{'n' if protocol.__name__[0] in 'AEIOU' else ''} {protocol.__name__}"
                    f"{f' (e.g. {hint})' if hint else ''}; {type(obj).__name__} lacks: {', '.join(members)}")


def _protocol_members(protocol: type) -> set:
    names = set()
    for klass in protocol.__mro__:
        if klass in (Protocol, object) or not getattr(klass, "_is_protocol", False):
            continue
        names.update(n for n in vars(klass) if not n.startswith("_") or n == "__len__")
        names.update(getattr(klass, "__annotations__", {}))
    return names
