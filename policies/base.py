"""The policy base class: one object owns the model and optimizer, and exposes three modes.

Middleware talk to a policy only through its modes, never by importing an algorithm; the modes implement
the contracts of ``engine.protocols``:

- ``learn_mode`` (``LearnPolicy``): ``forward(batch) -> dict`` runs one update on a batch and returns
  statistics; ``model`` is the module that takes gradients (the ddp middleware wraps it in
  ``DistributedDataParallel``); ``state_dict()/load_state_dict()`` cover everything an update changes
  (model, target model, optimizer, counters).
- ``collect_mode`` (``CollectPolicy``): ``forward(obs, **collect_kwargs) -> dict`` acts for data
  collection (at least ``action``); ``value(obs)`` for actor-critic algorithms, else None.
- ``eval_mode`` (``EvalPolicy``): ``forward(obs) -> dict`` acts greedily for evaluation.

A recurrent policy (``policies.ppo_lstm``, ``recurrent = True``) defines ``initial_state_on(mode)``; its collect
and eval modes then expose ``initial_state(num_envs)``, and their ``forward(obs, state=...)`` takes the memory of each env and returns the next one
(``next_state``). The env loop that steps them holds that memory (``data.env_loop``); the modes of a
feed-forward policy have ``initial_state = None``.

``acting_weights()`` / ``load_acting_weights()`` carry the weights a policy acts with to a copy of it in
another process (background evaluation, ``middleware.background_eval``).

``policy.obs_norm`` (``policies.obs_norm``): the policy normalises observations before every network with
running statistics that its collect mode updates (``collect_mode.forward`` observes what it is given) and
``merge_statistics()`` merges across ranks once per iteration; checkpointed under ``obs_norm`` in the state,
sent with ``acting_weights()``, inside ``greedy_module()``. PPO's ``policy.reward_norm`` (reward scaling) keeps
its return statistics the same way, under ``reward_norm``. A policy that routes its observations through
``_norm_obs`` says so with ``supports_obs_norm = True``; the others refuse the switch.

``policy.compile`` / ``policy.amp`` (``policies.accel``, docs/performance.md): a policy calls the functions
run on every step or update (its acting forward, its learner's forward and loss) through
``self._hot(name, fn, mode)``; the driver around them (moving batches, backward, optimizer step, target
update) stays eager. A mode whose first call used no hot path logs once that the switch does not apply to it.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

from data.replay.device import DeferredCheck, host_path

from .accel import HotPath, accel_modes, warn_once
from .noisy import set_noise as _set_noise
from .obs_norm import ObsNormMismatchError, RunningObsNorm

#: the keys of the observation statistics among ``acting_weights()``
OBS_NORM_PREFIX = "obs_norm:"

__all__ = ["Policy", "LearnMode", "CollectMode", "EvalMode", "NonFiniteLossError", "SpaceMismatchError",
           "DeviceMismatchError", "ObsNormMismatchError", "common_config", "evaluator_config", "to_numpy"]

logger = logging.getLogger(__name__)


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or inf; raised before the optimizer step, so parameters stay the last good ones."""


class SpaceMismatchError(ValueError):
    """The model's declared shapes or the algorithm's action type do not fit the env's spaces."""


class DeviceMismatchError(RuntimeError):
    """A tensor on another device than the policy mode declares (``policy.check_device=True``)."""


def common_config() -> Dict[str, Any]:
    """Config keys every policy has, merged into each ``default_config``."""
    return dict(
        cuda=False,                 # shorthand: learn, collect and evaluate on this process's GPU
        multi_gpu=False,            # DI-engine's DDP switch; a launcher decides (docs/distributed.md)
        device=dict(
            learn=None,             # e.g. "cuda:0"; None: the process's device (cuda=True: its GPU)
            collect=None,           # e.g. "cpu" or "cuda:1": acts through its own copy; None: the learner's model
            eval=None,              # likewise for evaluation
            refresh_every=1,        # iterations between copies of the learner's weights to the others
        ),
        check_device=False,         # check every tensor in and out of each mode (debugging; off: free)
        compile="none",             # "none" | "compile" | "cudagraph" (CUDA): the acting forward and the learner's
                                    # update compiled; docs/performance.md
        amp="none",                 # "none" | "bf16": autocast the acting forward and the learner's forward/loss
        obs_norm=False,             # normalise observations by their running mean and variance, updated from
                                    # collected ones, checkpointed, merged across DDP ranks (policies.obs_norm)
        obs_norm_clip=10.0,         # normalised observations are clipped to [-clip, clip]
    )


def evaluator_config(eval_freq: int) -> Dict[str, Any]:
    """The ``policy.eval`` section every policy has, with its own ``eval_freq``."""
    return dict(evaluator=dict(
        eval_freq=eval_freq,        # learner updates between evaluations
        background=False,           # evaluate a snapshot in another process while training goes on (docs/middleware.md)
        patience=0,                 # stop after this many evaluations in a row without a new best (0: never)
    ))


class LearnMode:
    """What a learner middleware may use of a policy (``engine.protocols.LearnPolicy``)."""

    def __init__(self, policy: "Policy") -> None:
        self.policy = policy
        self.forward: Callable[[Any], Dict[str, Any]] = policy._checked("learn", policy._watched(
            "learn", policy._forward_learn))
        self.state_dict = policy.state_dict
        self.load_state_dict = policy.load_state_dict
        self.cfg = policy.cfg
        end_epoch = getattr(policy, "end_epoch", None)
        if end_epoch is not None:  # an on-policy learner calls it after each epoch (PPO's adaptive learning rate)
            self.end_epoch: Callable[[], None] = end_epoch

    @property
    def model(self) -> torch.nn.Module:
        """The module that takes gradients; assign a wrapper (e.g. DDP) to train through it."""
        return self.policy._learn_model

    @model.setter
    def model(self, module: torch.nn.Module) -> None:
        self.policy._learn_model = module
        self.policy._drop_hot_paths("learn")  # rebuilt for the new module (a DDP wrapper: no CUDA graphs)

    @property
    def device(self) -> torch.device:
        return self.policy.device


class CollectMode:
    """What a collector (and the GAE estimator) may use (``engine.protocols.CollectPolicy``):
    ``forward(obs, **collect_kwargs)`` and, for actor-critic policies, ``value(obs)`` (None for value-free
    ones)."""

    def __init__(self, policy: "Policy") -> None:
        self.policy = policy
        self.forward: Callable[..., Dict[str, Any]] = policy._checked("collect", policy._watched(
            "collect", policy._observing(policy._forward_collect)))
        value = getattr(policy, "_value", None)
        self.value: Optional[Callable[..., Any]] = policy._checked("collect", value) if value else None
        self.initial_state: Optional[Callable[[int], torch.Tensor]] = policy.initial_state_on("collect")
        self.cfg = policy.cfg

    @property
    def device(self) -> torch.device:
        return self.policy.mode_devices["collect"]


class EvalMode:
    """What an evaluator may use (``engine.protocols.EvalPolicy``): ``forward(obs)``."""

    def __init__(self, policy: "Policy") -> None:
        self.policy = policy
        self.forward: Callable[..., Dict[str, Any]] = policy._checked("eval", policy._watched(
            "eval", policy._forward_eval))
        self.initial_state: Optional[Callable[[int], torch.Tensor]] = policy.initial_state_on("eval")
        self.cfg = policy.cfg

    @property
    def device(self) -> torch.device:
        return self.policy.mode_devices["eval"]


class Policy:
    """Base class of algorithms. Subclasses implement ``default_config`` and the three ``_forward_*``, and
    build their model through ``_init_model(factory)``.

    Devices: the learner works on ``self.device``; collection and evaluation act on
    ``mode_devices["collect"]`` / ``["eval"]`` (``policy.device.*``). A mode given its own device acts
    through its own copy of the model (``_actor(mode)``; modes on one device share it), built on the host
    and moved to its device, and ``refresh_actors()`` copies the learner's weights into it through host
    memory, so nothing meant for one GPU passes through another.

    Args:
        cfg: the compiled ``policy`` section of a config.
        observation_space, action_space: the env's single-env spaces; the model shapes are checked
            against them at construction (filled in from them when the config leaves them None).
        device: the learner's device, overriding ``policy.device.learn`` and ``cfg.cuda`` (the ddp runtime
            passes each rank's device).
    """

    #: "off_policy" (replay buffer) or "on_policy" (learn on what was just collected)
    pipeline: str = "off_policy"
    #: the env-step budget of a run built from defaults (``baton train --algo ... --env ...``) when none is
    #: given; None: the algorithm learns from a dataset (the offline pipeline's update budget applies)
    default_env_steps: Optional[int] = 1_000_000
    #: whether the policy routes every observation through ``_norm_obs`` (``policy.obs_norm`` is refused otherwise)
    supports_obs_norm: bool = False

    @classmethod
    def default_config(cls) -> Dict[str, Any]:
        raise NotImplementedError

    def __init__(self, cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: Optional[str | torch.device] = None) -> None:
        from engine.devices import parse_device

        self.cfg = cfg
        dev_cfg = dict(cfg.get("device") or {})
        learn = dev_cfg.get("learn")
        if device is not None:
            self.device = _indexed(torch.device(device))
            if learn is not None and torch.device(parse_device(learn, "policy.device.learn")) != self.device:
                logger.warning("policy.device.learn=%r is ignored: this process learns on %s (its DDP rank's "
                               "device)", learn, self.device)
        elif learn is not None:
            self.device = _indexed(torch.device(parse_device(learn, "policy.device.learn")))
        else:
            self.device = _indexed(_device_from_cfg(cfg))
        # a mode given its own device acts through its own copy of the model (even on the learner's device:
        # then refresh_every > 1 acts with weights that lag the learner's, by choice)
        self._own_copy = {mode for mode in ("collect", "eval") if dev_cfg.get(mode) is not None}
        self.mode_devices: Dict[str, torch.device] = {
            mode: _indexed(torch.device(parse_device(dev_cfg[mode], f"policy.device.{mode}")))
            if mode in self._own_copy else self.device for mode in ("collect", "eval")}
        self._check_device = bool(cfg.get("check_device", False))
        self.compile_mode, self.amp = accel_modes(cfg)  # policy.compile / policy.amp, checked here at start
        self._hot_paths: Dict[tuple, HotPath] = {}  # by (mode, name)
        self._finite_check: Optional[DeferredCheck] = None  # the loss check off the host (_check_finite)
        self._hot_modes: set = set()  # modes whose forward used a hot path, or chose a faster path on purpose
        self.observation_space = observation_space
        self.action_space = action_space
        self._learn_model: torch.nn.Module
        self._model_factory: Optional[Callable[[], torch.nn.Module]] = None
        self._actors: Dict[torch.device, torch.nn.Module] = {}  # acting copies, by device
        self._acting: Dict[str, torch.nn.Module] = {}           # the model each acting mode uses
        self._learn_mode = self._collect_mode = self._eval_mode = None
        self._noise = True  # noisy layers draw noise (set_noise)
        self._obs_norm = self._build_obs_norm(cfg, observation_space)
        self._reward_norm: Optional[RunningObsNorm] = None  # PPO's policy.reward_norm builds one

    # ---- observation normalisation (policy.obs_norm) -------------------------------------------------
    def _build_obs_norm(self, cfg: Mapping[str, Any], observation_space: gym.Space) -> Optional[RunningObsNorm]:
        """The running statistics on the learner's device, or None (``policy.obs_norm`` off).

        Raises:
            ValueError: the policy does not normalise, learns offline, or the observations are not flat floats.
        """
        if not cfg.get("obs_norm", False):
            return None
        name = type(self).__name__
        if self.pipeline == "offline":
            raise ValueError(f"policy.obs_norm=True: {name} learns offline from a dataset, and the statistics "
                             f"are updated from collected observations only; set policy.obs_norm=False "
                             f"(normalise the dataset's observations instead)")
        if not type(self).supports_obs_norm:
            raise ValueError(f"policy.obs_norm=True: {name} does not normalise observations (policies that "
                             f"do: ppo, a2c, sac, td3, ddpg); set policy.obs_norm=False")
        shape = getattr(observation_space, "shape", None) or ()
        if not isinstance(observation_space, gym.spaces.Box) or len(shape) != 1:
            raise ValueError(f"policy.obs_norm=True needs flat Box observations (a vector per step), got "
                             f"{observation_space}; set policy.obs_norm=False")
        return RunningObsNorm(shape, cfg.get("obs_norm_clip", 10.0)).to(self.device)

    def _statistics(self) -> Dict[str, RunningObsNorm]:
        """The running statistics this policy keeps, by state key: ``obs_norm`` and ``reward_norm`` when on."""
        return {key: norm for key, norm in (("obs_norm", self._obs_norm), ("reward_norm", self._reward_norm))
                if norm is not None}

    @property
    def keeps_statistics(self) -> bool:
        """Whether the policy keeps running statistics (``policy.obs_norm``, PPO's ``policy.reward_norm``): the
        pipeline then calls ``merge_statistics`` every iteration."""
        return bool(self._statistics())

    def merge_statistics(self) -> None:
        """Merge what was collected since the last call into the running statistics (all ranks' under DDP:
        every rank calls it at the same point of each iteration, one all-reduce per statistic). A no-op
        without any."""
        for norm in self._statistics().values():
            norm.merge()

    def _norm_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs`` normalised by the statistics (``policy.obs_norm``), or as it is."""
        return obs if self._obs_norm is None else self._obs_norm(obs)

    def _observing(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (the collect forward), which first adds its observations to the pending statistics when
        ``policy.obs_norm`` is on: collected observations only (the eval mode never calls it), random
        warm-up steps included."""
        if self._obs_norm is None:
            return fn
        norm = self._obs_norm

        def observing(obs: Any, *args: Any, **kwargs: Any) -> Any:
            norm.observe(obs if isinstance(obs, torch.Tensor) else np.asarray(obs))
            return fn(obs, *args, **kwargs)

        return observing

    def _export_obs_norm(self) -> Optional[torch.nn.Module]:
        """The frozen normalisation for ``greedy_module`` (``GreedyActor(preprocess=...)``), or None."""
        return None if self._obs_norm is None else self._obs_norm.frozen()

    @property
    def learn_mode(self) -> LearnMode:
        if self._learn_mode is None:
            self._learn_mode = LearnMode(self)
        return self._learn_mode

    @property
    def collect_mode(self) -> CollectMode:
        if self._collect_mode is None:
            self._collect_mode = CollectMode(self)
        return self._collect_mode

    @property
    def eval_mode(self) -> EvalMode:
        if self._eval_mode is None:
            self._eval_mode = EvalMode(self)
        return self._eval_mode

    #: whether the policy acts with a memory carried from step to step (``initial_state_on``)
    recurrent: bool = False

    def initial_state_on(self, mode: str) -> Optional[Callable[[int], torch.Tensor]]:
        """A recurrent policy's ``initial_state(num_envs)`` for ``mode`` ("collect" or "eval"): the memory an
        episode starts from, one row per env, on that mode's device. None for a feed-forward policy."""
        return None

    # ---- weights for a copy of this policy elsewhere -------------------------------------------------
    def acting_weights(self) -> Dict[str, Any]:
        """The weights the policy acts with (its model's), as numpy arrays on the host: a copy that later
        updates do not change, and that pickles by value (no shared memory, no device), so it can be sent
        to a copy of this policy in another process (``load_acting_weights``)."""
        weights = {name: tensor.numpy() for name, tensor in _host_state(self._model, copy=True).items()}
        if self._obs_norm is not None:  # the statistics it acts with too, under keys no model has
            weights.update({OBS_NORM_PREFIX + name: tensor.numpy()
                            for name, tensor in _host_state(self._obs_norm, copy=True).items()})
        return weights

    def load_acting_weights(self, weights: Mapping[str, Any]) -> None:
        """Act with ``weights`` (``acting_weights()`` of a policy built from the same config): loaded into
        the model, and into the acting copies on other devices."""
        stats = {name[len(OBS_NORM_PREFIX):]: torch.as_tensor(value) for name, value in weights.items()
                 if name.startswith(OBS_NORM_PREFIX)}
        self._model.load_state_dict({name: torch.as_tensor(value) for name, value in weights.items()
                                     if not name.startswith(OBS_NORM_PREFIX)})
        if self._obs_norm is not None:
            self._obs_norm.load_state_dict(stats)
        self.refresh_actors()

    # ---- models and devices ------------------------------------------------------------------------
    def _init_model(self, factory: Callable[[], torch.nn.Module]) -> torch.nn.Module:
        """Build the learner's model with ``factory`` (on the host, then moved); acting copies for other
        devices are built with it too."""
        self._model_factory = factory
        self._model = factory().to(self.device)
        self._learn_model = self._model
        return self._model

    @property
    def separate_actors(self) -> bool:
        """Whether collection or evaluation acts through its own copy of the model (``policy.device.collect``
        or ``.eval`` set); the pipeline then refreshes the copies every ``policy.device.refresh_every``
        iterations."""
        return bool(self._own_copy)

    def _actor(self, mode: str) -> torch.nn.Module:
        """The model ``mode`` ("collect" or "eval") acts with: the learner's own, or a copy on its device."""
        actor = self._acting.get(mode)
        if actor is None:
            device = self.mode_devices[mode]
            if mode not in self._own_copy:
                actor = self._model
            elif device in self._actors:
                actor = self._actors[device]
            else:
                actor = self._model_factory().requires_grad_(False)  # built on the host ...
                actor.load_state_dict(_host_state(self._model))
                _set_noise(actor, self._noise)
                actor = self._actors[device] = actor.to(device)     # ... and moved once to its own device
            self._acting[mode] = actor
        return actor

    def set_noise(self, enabled: bool) -> bool:
        """Parameter noise (``policies.noisy``) on or off in every model this policy owns: its checkpointed
        modules and acting copies, present and future. Off, noisy layers act and learn with their mean
        weights: ``baton check-ddp`` compares this way, since each DDP rank draws its own noise by design.
        Returns whether the policy has any noisy layer (False: nothing changed)."""
        self._noise = bool(enabled)
        modules = [getattr(self, attr) for _, attr in self._checkpointed] + list(self._actors.values())
        return sum(_set_noise(module, enabled) for module in modules) > 0

    def refresh_actors(self) -> None:
        """Copy the learner's weights into the acting copies, through host memory."""
        if self._actors:
            state = _host_state(self._model)
            for actor in self._actors.values():
                actor.load_state_dict(state)

    def _generator(self, device: torch.device) -> torch.Generator:
        """A torch generator on ``device`` for the policy's own random draws on tensors (exploration on a
        device env's observations), seeded from the policy's numpy RNG ``self._rng``, itself drawn from torch's:
        ``torch.manual_seed`` still makes collection reproducible."""
        generators = self.__dict__.setdefault("_generators", {})
        generator = generators.get(device)
        if generator is None:
            generator = generators[device] = torch.Generator(device).manual_seed(int(self._rng.integers(0, 2**62)))
        return generator

    # ---- hot paths: policy.compile / policy.amp ------------------------------------------------------
    def _hot(self, name: str, fn: Callable[..., Any], mode: str) -> HotPath:
        """``fn`` as ``mode``'s hot path (``policies.accel.HotPath``), built at its first use and kept.

        Args:
            name: the key it is kept under, with ``mode`` (one per function, e.g. ``"loss"``).
            fn: a method of this policy holding only tensor work (a forward, a loss), its own ``def``.
            mode: "learn" (on ``self.device``; its outputs take a backward, through ``learn_mode.model``,
                which may be a DDP wrapper), or "collect" / "eval" (on that mode's device).
        """
        path = self._hot_paths.get((mode, name))
        if path is None:
            learn = mode == "learn"
            ddp = learn and isinstance(self._learn_model, torch.nn.parallel.DistributedDataParallel)
            device = self.device if learn else self.mode_devices[mode]
            path = self._hot_paths[(mode, name)] = HotPath(fn, f"{type(self).__name__} {name}", self.compile_mode,
                                                           self.amp, device, ddp=ddp, train=learn)
        self._hot_modes.add(mode)
        return path

    def _drop_hot_paths(self, mode: str) -> None:
        """Forget ``mode``'s hot paths: they are built again at their next use (the learn model changed)."""
        for key in [key for key in self._hot_paths if key[0] == mode]:
            del self._hot_paths[key]

    def _faster_than_hot_path(self, mode: str, why: str) -> None:
        """``mode`` acts through a path of its own on purpose (say so once, when a switch is on)."""
        if mode not in self._hot_modes:
            self._hot_modes.add(mode)
            if self.compile_mode != "none" or self.amp != "none":
                logger.info("%s %s acts %s; policy.compile and policy.amp do not apply to it", type(self).__name__,
                            mode, why)

    def _without_forward(self, mode: str) -> None:
        """``mode`` answered a call without a forward (uniformly random actions): nothing to accelerate."""
        self._hot_modes.add(mode)

    def _watched(self, mode: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, or (a switch on) ``fn`` followed at its first call by a check that it used a hot path:
        a policy that routes nothing through ``_hot`` says so instead of ignoring the config."""
        if self.compile_mode == "none" and self.amp == "none":
            return fn
        checked = False

        def watched(*args: Any, **kwargs: Any) -> Any:
            nonlocal checked
            out = fn(*args, **kwargs)
            if not checked:
                checked = True
                if mode not in self._hot_modes:
                    warn_once("%s's %s mode does not route its forward through policy.compile/policy.amp "
                              "(Policy._hot): it runs eagerly in fp32", type(self).__name__, mode)
            return out

        return watched

    def _checked(self, mode: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` itself, or (``policy.check_device=True``) ``fn`` wrapped in a check of every tensor in its
        arguments, its model and its result against the mode's device."""
        if not self._check_device:
            return fn
        name = getattr(fn, "__name__", mode).lstrip("_")

        def checked(*args: Any, **kwargs: Any) -> Any:
            device = self.device if mode == "learn" else self.mode_devices[mode]
            model = self._model if mode == "learn" else self._actor(mode)
            allowed = {torch.device("cpu"), device}  # host tensors are moved by the mode itself
            for i, arg in enumerate(args):
                _check_tensors(f"{mode}_mode.{name} input {i}", arg, allowed, device)
            for key, arg in kwargs.items():
                _check_tensors(f"{mode}_mode.{name} input {key}", arg, allowed, device)
            for pname, tensor in list(model.named_parameters()) + list(model.named_buffers()):
                if tensor.device != device:
                    raise DeviceMismatchError(f"{mode}_mode model tensor {pname!r} is on {tensor.device}, "
                                              f"expected {device} (policy.device.{mode})")
            out = fn(*args, **kwargs)
            _check_tensors(f"{mode}_mode.{name} output", out, allowed, device)
            return out

        return checked

    def _check_finite(self, loss: torch.Tensor, algo: str) -> None:
        """Keep a non-finite ``loss`` from reaching the parameters, and raise ``NonFiniteLossError``.

        On the host: checked at once, before the step (``check_finite``). On a GPU without a host wait (a
        read of the loss would stall every update): the flag stays on the device and tells the fused Adam to
        skip the step (its ``found_inf``, as ``torch.amp.GradScaler`` uses it: parameters, moments and step
        count unchanged), and the error is raised at the next update, when the device has long computed it
        (``data.replay.device.DeferredCheck``). An optimizer that is not fused is checked at once, with the wait.
        """
        if host_path(loss.device) or not self._optimizer.defaults.get("fused"):
            check_finite(loss, algo, self._updates)
            return
        if self._finite_check is None:
            self._finite_check = DeferredCheck(loss.device, NonFiniteLossError)
        bad = ~torch.isfinite(loss.detach())
        self._finite_check.report(bad, f"{algo} loss is not finite (NaN or inf) at update {self._updates}, seen "
                                       f"one update later on {loss.device}; that update's step was skipped, so "
                                       f"the parameters are left at their last finite values. Lower "
                                       f"policy.learn.learning_rate or clip gradients")
        self._optimizer.found_inf = bad.float()

    def _optimize(self, loss: torch.Tensor, grad_clip: float = 0.0) -> None:
        """One optimizer step on ``loss``: backward, the gradient norm clipped to ``grad_clip`` (> 0), the step,
        the update count (``self._updates``). Needs ``self._optimizer`` over ``self._model``'s parameters."""
        self._optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self._model.parameters(), grad_clip)
        self._optimizer.step()
        self._updates += 1

    #: what a checkpoint holds besides the optimizer and the update count: (state key, module attribute)
    _checkpointed: Tuple[Tuple[str, str], ...] = (("model", "_model"),)

    def _optimizer_settings(self) -> List[Dict[str, float]]:
        """The config's optimizer settings (``lr``, ``weight_decay``) per parameter group, in the groups' order.
        The optimizer is built from them, and they are applied again over a checkpoint's, so that a resume
        runs with the config in force (a changed learning rate takes effect)."""
        raise NotImplementedError

    def state_dict(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {key: getattr(self, attr).state_dict() for key, attr in self._checkpointed}
        state.update(optimizer=self._optimizer.state_dict(), updates=self._updates)
        state.update({key: norm.state_dict() for key, norm in self._statistics().items()})
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Everything ``state_dict`` holds.

        Raises:
            ObsNormMismatchError: the state has observation statistics and ``policy.obs_norm`` is off, or the
                reverse (the message names the fix); checked before anything is loaded.
        """
        self._check_obs_norm_state(state)
        for key, attr in self._checkpointed:
            getattr(self, attr).load_state_dict(state[key])
        self._optimizer.load_state_dict(state["optimizer"])
        for group, settings in zip(self._optimizer.param_groups, self._optimizer_settings()):
            group.update(settings)
        self._updates = int(state["updates"])
        for key, norm in self._statistics().items():
            norm.load_state_dict(state[key])

    def _check_obs_norm_state(self, state: Mapping[str, Any]) -> None:
        """The checkpoint's running statistics and the config's switches agree (``policy.obs_norm``,
        ``policy.reward_norm``), or an error names the switch and both fixes."""
        kept = self._statistics()
        for key, what in (("obs_norm", "observation-normalisation"), ("reward_norm", "reward-scaling")):
            if key in kept and key not in state:
                raise ObsNormMismatchError(
                    f"the checkpoint holds no {what} statistics (it was written by a run without policy.{key}, or "
                    f"by an older baton), but this config sets policy.{key}=True: load it with policy.{key}=False "
                    f"(the override policy.{key}=false), or train a new run with it")
            if key not in kept and key in state:
                raise ObsNormMismatchError(
                    f"the checkpoint holds {what} statistics (its run set policy.{key}=True), but this config has "
                    f"policy.{key}=False, so it would not act or learn as that run did: load it with "
                    f"policy.{key}=True (the override policy.{key}=true)")

    def _forward_learn(self, batch: Any) -> Dict[str, Any]:
        raise NotImplementedError

    def _forward_collect(self, obs: Any, **kwargs: Any) -> Dict[str, Any]:
        raise NotImplementedError

    def _forward_eval(self, obs: Any) -> Dict[str, Any]:
        raise NotImplementedError

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


def _indexed(device: torch.device) -> torch.device:
    """``cuda`` as ``cuda:N`` (the current GPU): tensors report an index, and the device check compares."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _host_state(model: torch.nn.Module, copy: bool = False) -> Dict[str, torch.Tensor]:
    """The model's state on the host; ``copy``: always new tensors (else a CPU model's own are returned)."""
    return {k: v.detach().to("cpu", copy=copy) for k, v in model.state_dict().items()}


def _check_tensors(where: str, value: Any, allowed: set, device: torch.device, path: str = "") -> None:
    """Every tensor inside ``value`` (tensors, dicts, batches, lists) must be on a device in ``allowed``."""
    if isinstance(value, torch.Tensor):
        if value.device not in allowed:
            raise DeviceMismatchError(f"{where}{path or ''}: tensor is on {value.device}, expected {device} (or "
                                      f"cpu, which the mode moves itself)")
    elif hasattr(value, "items"):
        for key, item in value.items():
            _check_tensors(where, item, allowed, device, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_tensors(where, item, allowed, device, f"{path}[{i}]")


def _device_from_cfg(cfg: Mapping[str, Any]) -> torch.device:
    if cfg.get("cuda", False):
        if torch.cuda.is_available():
            return torch.device("cuda")
        logger.warning("policy.cuda=True but CUDA is not available: running on the CPU")
    return torch.device("cpu")


def resolve_shape(cfg_model: Dict[str, Any], key: str, actual: Sequence[int] | int, policy: str,
                  env_desc: str) -> Any:
    """Fill ``cfg_model[key]`` from the env when None, or check it against the env.

    Raises:
        SpaceMismatchError: naming both shapes, so the mistake shows at start and not inside a matmul.
    """
    declared = cfg_model.get(key)
    if declared is None:
        cfg_model[key] = list(actual) if isinstance(actual, (tuple, list)) else actual
        return cfg_model[key]
    norm = lambda v: [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v)]  # noqa: E731
    if norm(declared) != norm(actual):
        raise SpaceMismatchError(f"policy.model.{key}={declared!r} of {policy} does not match the env "
                                 f"{env_desc}: expected {actual!r}")
    return declared


def make_adam(params: Any, **kwargs: Any) -> torch.optim.Optimizer:
    """Adam, fused where this torch supports it (CPU fused Adam since torch 2.4: ~20% faster updates for
    small networks, where per-parameter Python loops dominate). ``params``: parameters, or parameter groups
    (dicts with ``params``)."""
    params = [dict(p, params=list(p["params"])) if isinstance(p, dict) else p for p in params]
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.Adam(params, foreach=True, **kwargs)


def to_numpy(*tensors: torch.Tensor) -> tuple:
    """Several tensors as numpy arrays with one wait for their device: the copies to the host are queued
    together (``non_blocking``) and the stream is synchronised once, where ``.cpu()`` on each would wait for
    the device once per tensor (three times a vector step in PPO's acting)."""
    if all(t.device.type == "cpu" for t in tensors):
        return tuple(t.numpy() for t in tensors)
    host = [t.to("cpu", non_blocking=True) for t in tensors]
    for device in {t.device for t in tensors if t.device.type == "cuda"}:
        torch.cuda.current_stream(device).synchronize()
    return tuple(h.numpy() for h in host)


def check_finite(loss: torch.Tensor, algo: str, update: int) -> None:
    """Raise NonFiniteLossError before the optimizer step, so the parameters stay the last good ones."""
    if not torch.isfinite(loss):
        raise NonFiniteLossError(f"{algo} loss is {loss.item()} at update {update}; the parameters are left at "
                                 f"their last finite values. Lower policy.learn.learning_rate or clip gradients")


def space_dims(observation_space: gym.Space, action_space: gym.Space, policy: str,
               continuous: Optional[bool] = None, images: bool = False) -> tuple:
    """``(obs_shape, action_dim, is_continuous)`` of Box observations (flat, or ``[C, H, W]`` image stacks
    where ``images``) and a Discrete or Box action space.

    Raises:
        SpaceMismatchError: naming the policy, the space and what it needs.
    """
    ndim = len(getattr(observation_space, "shape", ()) or ())
    if not isinstance(observation_space, gym.spaces.Box) or ndim not in ((1, 3) if images else (1,)):
        raise SpaceMismatchError(f"policy {policy!r} needs a flat Box observation space"
                                 f"{' or [C, H, W] images' if images else ''}, got {observation_space}")
    if isinstance(action_space, gym.spaces.Discrete):
        is_continuous, action_dim = False, int(action_space.n)
    elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        is_continuous, action_dim = True, int(action_space.shape[0])
    else:
        raise SpaceMismatchError(f"policy {policy!r} does not support the action space {action_space}")
    if continuous is True and not is_continuous:
        raise SpaceMismatchError(f"policy {policy!r} needs a continuous (Box) action space, but the env's action "
                                 f"space is {action_space}; use a discrete-action policy such as 'dqn' or 'ppo'")
    if continuous is False and is_continuous:
        raise SpaceMismatchError(f"policy {policy!r} needs a discrete action space, but the env's action space "
                                 f"is {action_space}; use a continuous-action policy such as 'sac' or 'ppo'")
    return tuple(int(d) for d in observation_space.shape), action_dim, is_continuous
