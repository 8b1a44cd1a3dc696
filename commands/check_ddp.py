"""``baton check-ddp -c CFG [--nproc 2]``: can this config's model be trusted under DDP?

It runs the standard pipeline of the config data-parallel (gloo, on CPU) until the first update, with one
update per iteration; each rank records its batch, the learn state before the update and the model after.
Then, in this process, it makes the same update from rank 0's state on the ranks' batches concatenated, and
reports:

- the largest difference between the data-parallel result and the one-process result;
- parameters that differ between ranks after the update (DDP did not synchronise them);
- parameters that received no gradient on some rank (unused in the forward pass: DDP then needs
  ``find_unused_parameters`` or fails at the next step);
- buffers that differ between ranks (batch-norm statistics: DDP broadcasts rank 0's at each forward and
  never averages them).

Exact agreement is expected for a loss that is a mean over the batch with no randomness (DQN, with a scalar
or distributional head), for PPO, whose advantages are normalised with the statistics of every rank's
minibatch together (``policies.ppo.normalise_advantages``), and for TD3, whose target smoothing noise is drawn
for the global batch, each rank taking its rows (``policies.td3``). A loss that draws random numbers per rank
(SAC's sampled actions) differs from one process by design; the other findings still hold.

A recurrent policy (``ppo_lstm``) learns from whole sequences, each unrolled from the memory stored with its
first step: the ranks' sequences, joined along the sequence axis, are the one-process batch, and the
comparison is exact as for PPO.

Noisy layers (``policies.noisy``, Rainbow) draw new noise at every forward, and under DDP each rank draws its
own, by design (each rank's generator is seeded ``seed + rank``): the averaged gradient is then an average over
noise draws too, which no one-process update reproduces. The check therefore turns their noise off on every
rank and in the reference (``Policy.set_noise(False)``: the layers use their mean weights, and their noise
scales stay in the graph with a zero gradient) and says so in the report; what it then compares is all the
rest of the update, noise scales' synchronisation included.
"""
from __future__ import annotations

import copy
import os
import tempfile
from typing import Any, Dict, List, Mapping, Tuple

import torch
from easydict import EasyDict

from engine.config import ConfigError, compile_config, plain
from engine.distributed import DistributedError, check_comm_hook
from engine.launcher import launch
from engine.registry import ENV_REGISTRY, POLICY_REGISTRY
from data.batch import make_batch
from data.obs import cat, from_plain, num_rows, to_plain
from data.envs import make_vector_env

__all__ = ["check_ddp", "compare_ranks", "DDPCheckReport"]

ConfigPair = Tuple[Mapping[str, Any], Mapping[str, Any]]


class DDPCheckReport(dict):
    """``max_difference``, ``differ_across_ranks``, ``unused``, ``buffers_differ``, ``noise_off`` (noisy layers
    compared without their noise) and ``ok``; ``str()`` is the human report."""

    def __str__(self) -> str:
        lines = [f"one update on {self['world_size']} ranks against the same update in one process on their "
                 f"batches concatenated ({self['batch_size']} transitions per rank):",
                 f"  largest parameter difference: {self['max_difference']:.3g} (tolerance {self['tolerance']:.1g})"
                 f" in {self['worst_parameter']!r}"]
        for key, what in (("differ_across_ranks", "parameters that differ between ranks (not synchronised)"),
                          ("unused", "parameters with no gradient on some rank (unused in the forward pass)"),
                          ("buffers_differ", "buffers that differ between ranks (DDP does not average them)")):
            lines.append(f"  {what}: {', '.join(self[key]) if self[key] else 'none'}")
        if self.get("noise_off"):
            lines.append("  noisy layers: compared with their noise off on every rank and in the reference (each rank "
                         "draws its own noise by design)")
        if self["ok"]:
            lines.append("OK: the data-parallel update equals the one-process update")
        else:
            lines.append("NOT EQUAL: see above. A loss that draws random numbers (SAC) or normalises within each "
                         "rank's batch differs by design; unsynchronised or unused parameters and differing "
                         "buffers are problems of the model")
        return "\n".join(lines)


def _learn_only(input_cfg: ConfigPair, tmp: str) -> ConfigPair:
    """The config, changed so that the first iteration that trains makes exactly one update, on the CPU
    (where results are reproducible), writing only in ``tmp``."""
    main, create = plain(input_cfg[0]), plain(input_cfg[1])
    policy_type = (create.get("policy") or {}).get("type") or main.get("policy", {}).get("type")
    on_policy = POLICY_REGISTRY.get(policy_type).pipeline == "on_policy"
    policy = main.setdefault("policy", {})
    learn = policy.setdefault("learn", {})
    if on_policy:  # one epoch of one minibatch: everything collected
        defaults = POLICY_REGISTRY.get(policy_type).default_config()
        n_sample = policy.get("collect", {}).get("n_sample", defaults["collect"]["n_sample"])
        learn.update(epoch_per_collect=1, batch_size=int(n_sample))
    else:
        learn["update_per_collect"] = 1
    policy["cuda"] = False
    main["exp_name"] = os.path.join(tmp, "exp")
    main.setdefault("log", {}).update(tensorboard=False, progress=False)
    return EasyDict(main), EasyDict(create)


def _check_rank(input_cfg: ConfigPair, seed: int, tmp: str) -> None:
    """One rank: run the pipeline until its first update, and save what the comparison needs."""
    from engine.distributed import get_rank
    from pipelines import build_pipeline

    pipeline = build_pipeline(input_cfg, seed=seed, exp_name=os.path.join(tmp, "exp"), progress=False)
    policy = pipeline.policy
    learn = policy.learn_mode
    record: Dict[str, Any] = {"noise_off": policy.set_noise(False)}  # per-rank noise differs by design

    def before_learner(ctx: Any) -> None:
        record["before"] = copy.deepcopy(learn.state_dict())

    def after_learner(ctx: Any) -> None:
        if ctx.train_iter == 0:
            return
        # plain dicts for a tree field (a Dict observation): torch.load(weights_only=True) reads no tree class
        record["batch"] = {k: to_plain(v.clone()) for k, v in ctx.train_data.items()}
        record["after"] = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
        record["unused"] = [n for n, p in policy.model.named_parameters() if p.requires_grad and p.grad is None]
        record["buffers"] = {n: b.detach().clone() for n, b in policy.model.named_buffers()}
        ctx.finish = True  # rank 0's decision reaches every rank; all trained in this same iteration

    pipeline.insert_before("learner", before_learner, name="check_before")
    pipeline.insert_after("learner", after_learner, name="check_after")
    pipeline.run(max_step=10_000)
    torch.save(record, os.path.join(tmp, f"rank{get_rank()}.pt"))


def _reference(input_cfg: ConfigPair, before: Mapping[str, Any], batches: List[Mapping[str, Any]],
               tmp: str) -> Dict[str, torch.Tensor]:
    """The same update in this process, from rank 0's state, on all batches concatenated."""
    cfg = compile_config(*input_cfg, exp_name=os.path.join(tmp, "reference"), save=False)
    env_type = ENV_REGISTRY.get(cfg.env.type)
    env = make_vector_env(env_type, cfg.env, 1, cfg.seed)
    try:
        policy = POLICY_REGISTRY.get(cfg.policy.type)(cfg.policy, env.single_observation_space,
                                                       env.single_action_space)
    finally:
        env.close()
    policy.learn_mode.load_state_dict(before)
    policy.set_noise(False)  # as on the ranks (_check_rank)
    policy.learn_mode.forward(make_batch({k: cat([from_plain(b[k]) for b in batches]) for k in batches[0]}))
    return {k: v.detach() for k, v in policy.model.state_dict().items()}


def compare_ranks(records: List[Mapping[str, Any]], reference: Mapping[str, torch.Tensor],
                  tolerance: float = 1e-5) -> DDPCheckReport:
    """The report from every rank's record and the one-process result (see the module docstring)."""
    after0 = records[0]["after"]
    worst, max_diff = "", 0.0
    for name, value in reference.items():
        diff = float((after0[name].float() - value.float()).abs().max()) if value.numel() else 0.0
        if diff > max_diff or not worst:
            worst, max_diff = name, diff
    buffers = set(records[0]["buffers"])
    differ = sorted({n for r in records[1:] for n, v in r["after"].items()
                     if n not in buffers and not torch.equal(v, after0[n])})
    buffers_differ = sorted({n for r in records[1:] for n, v in r["buffers"].items()
                             if not torch.equal(v, records[0]["buffers"][n])})
    unused = sorted({n for r in records for n in r["unused"]})
    ok = max_diff <= tolerance and not differ and not unused and not buffers_differ
    return DDPCheckReport(max_difference=max_diff, worst_parameter=worst, differ_across_ranks=differ,
                          unused=unused, buffers_differ=buffers_differ, ok=ok, tolerance=tolerance,
                          noise_off=bool(records[0].get("noise_off", False)),
                          world_size=len(records), batch_size=_transitions(records[0]["batch"]))


def _transitions(batch: Mapping[str, torch.Tensor]) -> int:
    """Transitions in a rank's batch: its rows, or the steps of its sequences (a recurrent policy's ``[B, L]``
    fields, ``data.sequences``)."""
    if "reward" in batch:
        return int(batch["reward"].numel())
    return num_rows(from_plain(next(iter(batch.values()))))


def check_ddp(input_cfg: ConfigPair, nproc: int = 2, seed: int = 0, tolerance: float = 1e-5) -> DDPCheckReport:
    """Run the check (module docstring) on ``nproc`` local gloo processes and return the report."""
    if nproc < 2:
        raise ValueError(f"--nproc {nproc}: the check compares at least 2 ranks")
    try:  # the check runs on gloo: a hook gloo cannot run is refused here, in one line
        check_comm_hook(compile_config(*input_cfg, save=False).ddp.comm_hook, "gloo")
    except DistributedError as err:
        raise ConfigError(f"baton check-ddp runs on gloo: {err}") from None
    with tempfile.TemporaryDirectory(prefix="baton-check-ddp-") as tmp:
        pair = _learn_only(input_cfg, tmp)
        launch(_check_rank, nproc, args=(pair, seed, tmp), backend="gloo")
        records = [torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=True) for r in range(nproc)]
        reference = _reference(pair, records[0]["before"], [r["batch"] for r in records], tmp)
    return compare_ranks(records, reference, tolerance)
