"""The policy base class: an algorithm defines its model, its update, how it acts, its greedy module and its
state; the base composes the rest around it and exposes three modes (``policies.modes``).

Middleware talk to a policy only through its modes, never by importing an algorithm; the modes implement
the contracts of ``engine.protocols``:

- ``learn_mode`` (``LearnPolicy``): ``forward(batch) -> dict`` runs one update on a batch and returns
  statistics; ``model`` is the module that takes gradients (the ddp middleware wraps it in
  ``DistributedDataParallel``); ``state_dict()/load_state_dict()`` cover everything an update changes
  (model, target model, optimizer, counters).
- ``collect_mode`` (``CollectPolicy``): ``forward(obs, **collect_kwargs) -> dict`` acts for data
  collection (at least ``action``); ``value(obs)`` for actor-critic algorithms, else None.
- ``eval_mode`` (``EvalPolicy``): ``forward(obs) -> dict`` acts greedily for evaluation.

The acting modes take tensors and answer with tensors: ``obs`` is a tensor with one row per env, on the host
for gymnasium envs and on the envs' device for batched torch envs (``data.env_loop`` converts, never the
policy); what they return is on the mode's device, and the env loop sends the action to the env.

What the base composes, one piece each:

- ``placement`` (``policies.placement``): the learner's device, each acting mode's device and its copy of the
  model (``refresh_actors``).
- ``normalisation`` (``policies.normalisation``): ``policy.obs_norm``'s running statistics (and PPO's
  ``policy.reward_norm``), updated by the collect mode, merged across ranks (``merge_statistics``),
  checkpointed, sent with ``acting_weights()``.
- ``hot_paths`` (``policies.accel``): ``policy.compile`` / ``policy.amp`` for the methods an algorithm
  declares with ``@hot_path(mode)``.
- ``optimizer_step`` (``policies.optim``): the algorithm builds it over its parameters; one ``step(loss)``
  per update checks the loss, steps and counts.
- ``policy.check_device`` (``policies.checks``): every tensor in and out of each mode checked.
- ``graphed_updates`` (``policies.update_graph``): with ``policy.compile='cudagraph_update'``, an off-policy
  learner's updates as one CUDA graph, for an algorithm that writes its update graph-safe (``_graph_update``).

A recurrent policy (``policies.ppo_lstm``, ``recurrent = True``) defines ``initial_state_on(mode)``; its collect
and eval modes then expose ``initial_state(num_envs)``, and their ``forward(obs, state=...)`` takes the memory
of each env and returns the next one (``next_state``). The env loop that steps them holds that memory
(``data.env_loop``); the modes of a feed-forward policy have ``initial_state = None``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, ClassVar, Dict, Mapping, Optional, Tuple, Type

import gymnasium as gym
import torch


from .accel import HotPaths, accel_modes
from .checks import DeviceMismatchError, NonFiniteLossError, check_finite
from .defaults import (OfflineEvalParams, OnlineEvalParams, PolicyParams, check_collection, check_policy_section,
                       refuse_recurrent_keys)
from .modes import CollectMode, EvalMode, LearnMode
from .noisy import set_noise as _set_noise
from .normalisation import OBS_NORM_PREFIX, Normalisation
from .obs_norm import ObsNormMismatchError
from .optim import OptimizerStep, make_adam
from .placement import Placement, host_state
from .spaces import SpaceMismatchError, resolve_shape, space_dims
from .update_graph import GraphedUpdates, capture_refusal, fall_back, module_tensors

#: methods an eager update calls that a graph-safe ``_graph_update`` does not (``Policy._graph_update_missing``)
_EAGER_UPDATE_METHODS = ("_forward_learn", "_step", "_smoothing_noise")

__all__ = ["Policy", "LearnMode", "CollectMode", "EvalMode", "NonFiniteLossError", "SpaceMismatchError",
           "DeviceMismatchError", "ObsNormMismatchError", "PolicyParams", "OfflineEvalParams", "OnlineEvalParams",
           "check_finite", "make_adam", "space_dims", "resolve_shape", "OBS_NORM_PREFIX"]


class Policy:
    """Base class of algorithms.

    A subclass declares its ``policy`` section as ``Params`` (a dataclass deriving from ``PolicyParams``, one
    docstring per key; ``self.params`` is the typed section it reads), implements the three ``_forward_*`` (and ``_value`` for an actor-critic), and
    in its ``__init__``, after this one: ``self.model = self.placement.build(factory)`` (the learner's model,
    on ``self.device``; acting copies are built with ``factory`` too) and ``self.optimizer_step =
    OptimizerStep.adam(...)``. It declares its hot paths with ``@hot_path(mode)``, what a checkpoint holds
    with ``_checkpointed``, and acts with ``self.placement.actor(mode)`` on ``self.mode_devices[mode]``.

    Args:
        cfg: the ``policy`` section of a config (keys it lacks take their defaults; an unknown key or a wrong
            type is a ``ConfigError``); read through ``self.params``.
        observation_space, action_space: the env's single-env spaces; the model shapes are checked
            against them at construction (filled in from them when the config leaves them None).
        device: the learner's device, overriding ``policy.device.learn`` and ``cfg.cuda`` (the ddp runtime
            passes each rank's device).
    """

    #: the pipeline's shape (``pipelines.build.SHAPES``): "off_policy" (replay buffer), "on_policy" (learn on
    #: what was just collected) or "offline" (a dataset)
    pipeline: str = "off_policy"
    #: the action spaces it builds on: "discrete" (Discrete), "continuous" (Box); ``--list-algos`` prints them
    action_spaces: Tuple[str, ...] = ()
    #: whether it trains the several agents of each env (``data.parallel_envs``: MAPPO, IPPO) rather than one;
    #: ``--list-algos`` prints it, and ``--env`` with a single-agent id never suggests such an algorithm
    multi_agent: bool = False
    #: the env-step budget of a run built from defaults (``baton train --algo ... --env ...``) when none is
    #: given; None: the algorithm learns from a dataset (the offline pipeline's update budget applies)
    default_env_steps: Optional[int] = 1_000_000
    #: whether the policy routes every observation through ``normalisation.norm_obs`` (``policy.obs_norm`` is
    #: refused otherwise)
    supports_obs_norm: bool = False
    #: whether the policy acts with a memory carried from step to step (``initial_state_on``)
    recurrent: bool = False
    #: why an acting mode may run without a hot path on purpose, e.g. "through a lean forward on the CPU": said once
    #: when ``policy.compile`` or ``policy.amp`` is on (None: a mode without one is warned about)
    eager_acting: Optional[str] = None
    #: what a checkpoint holds besides the optimizer and the update count: (state key, module attribute)
    _checkpointed: Tuple[Tuple[str, str], ...] = (("model", "model"),)
    #: its ``policy`` section: each key's type, default, rule and meaning, declared once (``engine.params``);
    #: an algorithm derives its own from ``PolicyParams`` and reads ``self.params``
    Params: ClassVar[Type[PolicyParams]] = PolicyParams

    @classmethod
    def default_config(cls) -> Dict[str, Any]:
        """The ``policy`` section's defaults, as a config file would hold them (from ``Params``)."""
        defaults = cls.Params.defaults()
        defaults.pop("type", None)
        return defaults

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """The compiled config's ``policy`` section, at compile time, before any env starts (the rules its
        ``Params`` declare, the checks every policy has, and what its collection asks of the machine:
        ``check_collection``). A subclass with checks of its own calls this first.

        Raises:
            engine.config.ConfigError: naming the key and the fix.
        """
        check_policy_section(cfg, cls.Params.rules("policy"))
        check_collection(cfg, cls.pipeline)

    @classmethod
    def check_user_keys(cls, policy_type: str, user_policy: Mapping[str, Any]) -> None:
        """The user's ``policy`` section before the defaults are merged under it: keys the algorithm refuses
        by name and reason (a recurrent policy's keys on a feed-forward one) rather than as unknown keys."""
        refuse_recurrent_keys(cls, policy_type, user_policy)

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        self.cfg = cfg
        self.params = params = self.Params.of(cfg, "policy")
        self.observation_space = observation_space
        self.action_space = action_space
        self.placement = Placement(params.device, params.cuda, device)
        self.device = self.placement.device
        self.mode_devices: Dict[str, torch.device] = self.placement.mode_devices
        self.check_device = params.check_device
        self.compile_mode, self.amp = accel_modes(params.compile, params.amp)  # checked here at start
        self.hot_paths = HotPaths(type(self).__name__, self.compile_mode, self.amp,
                                  {"learn": self.device, **self.mode_devices}, self.eager_acting)
        self.normalisation = Normalisation.from_config(params, observation_space, type(self), self.device)
        missing = self._graph_update_missing() if self.compile_mode == "cudagraph_update" else None
        if missing is not None:
            fall_back(type(self).__name__ + "'s update", missing)
        self.optimizer_step: OptimizerStep  # built by the algorithm over its parameters
        self.model: torch.nn.Module        # built by the algorithm: self.placement.build(factory)
        self._learn_wrapper: Optional[torch.nn.Module] = None  # learn_mode.model's wrapper (DDP), if any

    # ---- the modes ---------------------------------------------------------------------------------
    # built at first use (an algorithm's __init__ is complete by then), then kept
    @functools.cached_property
    def learn_mode(self) -> LearnMode:
        return LearnMode(self)

    @functools.cached_property
    def collect_mode(self) -> CollectMode:
        return CollectMode(self)

    @functools.cached_property
    def eval_mode(self) -> EvalMode:
        return EvalMode(self)

    @property
    def learn_model(self) -> torch.nn.Module:
        """The module the learner's loss runs: the model, or the wrapper ``learn_mode.model`` was given (DDP)."""
        return self.model if self._learn_wrapper is None else self._learn_wrapper

    @learn_model.setter
    def learn_model(self, module: torch.nn.Module) -> None:
        self._learn_wrapper = None if module is self.model else module
        # the learn hot paths are built again for the new module (a DDP wrapper: no CUDA graphs)
        self.hot_paths.drop("learn", ddp=isinstance(module, torch.nn.parallel.DistributedDataParallel))

    # ---- what an algorithm defines -----------------------------------------------------------------
    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        raise NotImplementedError

    def _forward_collect(self, obs: torch.Tensor, **kwargs: Any) -> Dict[str, torch.Tensor]:
        raise NotImplementedError

    def _forward_eval(self, obs: torch.Tensor) -> Dict[str, torch.Tensor]:
        raise NotImplementedError

    def initial_state_on(self, mode: str) -> Optional[Callable[[int], torch.Tensor]]:
        """A recurrent policy's ``initial_state(num_envs)`` for ``mode`` ("collect" or "eval"): the memory an
        episode starts from, one row per env, on that mode's device. None for a feed-forward policy."""
        return None

    def greedy_module(self) -> torch.nn.Module:
        """The eval mode as one torch module, observations in, actions out, with a copy of the weights on
        the CPU (``policies.greedy``; ``baton export`` writes it as a TorchScript or ONNX file).

        Raises:
            policies.greedy.NotExportableError: this policy defines none (say which policy).
        """
        from .greedy import NotExportableError

        raise NotExportableError(f"policy {type(self).__name__} ({type(self).__module__}) defines no "
                                 f"greedy_module(): its eval mode cannot be exported as one module; implement "
                                 f"greedy_module() returning policies.greedy.GreedyActor around its acting network")

    # ---- captured updates (policy.compile='cudagraph_update', policies.update_graph) ----------------
    def graphed_updates(self, buffer: Any, batch_size: int, updates: int,
                        priority: bool = False) -> Optional[GraphedUpdates]:
        """An off-policy learner's ``updates`` updates a call on ``buffer`` as one CUDA graph, where
        ``policy.compile='cudagraph_update'`` asks for it and they can be captured; None otherwise (when asked,
        after a warning naming why: the updates then run as ``cudagraph`` runs them)."""
        if self.compile_mode != "cudagraph_update":
            return None
        name = f"{type(self).__name__}'s update"
        if self._graph_update_missing() is not None:
            return None  # said at start (__init__)
        why = capture_refusal(self, buffer)
        if why is not None:
            if self.device.type == "cuda":  # off CUDA the hot paths say it (policies.accel): CUDA graphs need CUDA
                fall_back(name, why)
            return None
        return self.update_program(buffer, batch_size, updates, priority)

    def _graph_update_missing(self) -> Optional[str]:
        """Why this policy has no graph-safe update (``_graph_update``) for its own ``_forward_learn``, or None.
        A subclass that writes its own ``_forward_learn`` below the class that wrote ``_graph_update`` changed
        the update the graph would replay: it is refused rather than trained with its parent's update."""
        def owner(name: str) -> Optional[type]:
            return next((c for c in type(self).__mro__ if name in vars(c)), None)

        graph = owner("_graph_update")
        if graph is None:
            return "it has no graph-safe update (DQN, Rainbow, SAC, TD3 and DDPG have one)"
        mro = type(self).__mro__
        for name in _EAGER_UPDATE_METHODS:  # what only the eager update calls, found before the graph's (a subclass, a mixin)
            mine = owner(name)
            if mine is not None and mro.index(mine) < mro.index(graph):
                return (f"{mine.__name__} writes its own {name}, and its graph-safe _graph_update is still "
                        f"{graph.__name__}'s (write one beside it)")
        return None

    def update_program(self, buffer: Any, batch_size: int, updates: int, priority: bool = False,
                       capture: bool = True) -> GraphedUpdates:
        """``GraphedUpdates`` over this policy's ``_graph_update`` (``capture=False``: the same program run
        eagerly, as the CPU tests run it). From here on the learn hot paths compile inside the graph."""
        self.hot_paths.capture_learn()
        step = self.optimizer_step
        if capture:  # Adam refuses a step inside a capture unless built capturable (the fused one keeps its count
            step.make_capturable()  # on the device either way)

        def finish(done: int) -> None:
            step.updates += done

        def bound() -> list:
            return [t for _, attr in self._checkpointed for t in module_tensors(getattr(self, attr))] + \
                step.bound_tensors()

        def released() -> None:  # the capture failed: the learn hot paths are CUDA-graphed themselves again
            self.hot_paths.captured = False
            self.hot_paths.drop("learn", self.hot_paths.ddp)

        program = GraphedUpdates(f"{type(self).__name__}'s update", buffer, batch_size, updates,
                                 getattr(self, "_graph_update"), lambda: step.updates, finish, bound, priority,
                                 capture, released, period=getattr(self, "graph_period", 1),
                                 refusal=lambda: capture_refusal(self, buffer))
        step.watch(program.flush)  # a checkpoint says what the device flagged first
        return program

    # ---- state -------------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {key: getattr(self, attr).state_dict() for key, attr in self._checkpointed}
        state.update(self.optimizer_step.state_dict())
        state.update(self.normalisation.state_dict())
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Everything ``state_dict`` holds; the optimizer under the config's settings (``policies.optim``).

        Raises:
            ObsNormMismatchError: the state has observation statistics and ``policy.obs_norm`` is off, or the
                reverse (the message names the fix); checked before anything is loaded.
        """
        self.normalisation.check_state(state)
        for key, attr in self._checkpointed:
            getattr(self, attr).load_state_dict(state[key])
        self.optimizer_step.load_state_dict(state)
        self.normalisation.load_state_dict(state)

    # ---- running statistics (policies.normalisation) -----------------------------------------------
    @property
    def keeps_statistics(self) -> bool:
        """Whether the policy keeps running statistics (``policy.obs_norm``, PPO's ``policy.reward_norm``): the
        pipeline then calls ``merge_statistics`` every iteration."""
        return bool(self.normalisation.kept())

    def merge_statistics(self) -> None:
        """Merge what was collected since the last call into the running statistics (all ranks' under DDP:
        every rank calls it at the same point of each iteration, one all-reduce per statistic). A no-op
        without any."""
        self.normalisation.merge()

    # ---- acting copies (policies.placement) --------------------------------------------------------
    @property
    def separate_actors(self) -> bool:
        """Whether collection or evaluation acts through its own copy of the model (``policy.device.collect``
        or ``.eval`` set); the pipeline then refreshes the copies every ``policy.device.refresh_every``
        iterations."""
        return self.placement.separate

    def refresh_actors(self) -> None:
        """Copy the learner's weights into the acting copies, through host memory."""
        self.placement.refresh()

    def acting_weights(self) -> Dict[str, Any]:
        """The weights the policy acts with (its model's and its observation statistics), as numpy arrays on
        the host: a copy that later updates do not change, and that pickles by value (no shared memory, no
        device), so it can be sent to a copy of this policy in another process (``load_acting_weights``)."""
        weights = {name: tensor.numpy() for name, tensor in host_state(self.model, copy=True).items()}
        weights.update(self.normalisation.acting_weights())
        return weights

    def load_acting_weights(self, weights: Mapping[str, Any]) -> None:
        """Act with ``weights`` (``acting_weights()`` of a policy built from the same config): loaded into
        the model, and into the acting copies on other devices."""
        model_weights = self.normalisation.load_acting_weights(weights)
        self.model.load_state_dict({name: torch.as_tensor(value) for name, value in model_weights.items()})
        self.refresh_actors()

    def set_noise(self, enabled: bool) -> bool:
        """Parameter noise (``policies.noisy``) on or off in every model this policy owns: its checkpointed
        modules and acting copies, present and future. Off, noisy layers act and learn with their mean
        weights: ``baton check-ddp`` compares this way, since each DDP rank draws its own noise by design.
        Returns whether the policy has any noisy layer (False: nothing changed)."""
        self.placement.noise = bool(enabled)
        modules = [getattr(self, attr) for _, attr in self._checkpointed] + self.placement.copies
        return sum(_set_noise(module, enabled) for module in modules) > 0
