"""A time-major rollout cut into the sequences a recurrent policy learns from.

An on-policy collector gathers ``[T, E]`` steps (``T`` steps of ``E`` envs). A recurrent policy cannot learn
from shuffled single transitions: each step's output depends on the memory the steps before it built. So the
rollout is cut, per env, into ``T / L`` consecutive sequences of ``L = seq_len`` steps, laid out batch-first
``[E * T / L, L]`` (env ``e``'s sequence ``c`` is row ``e * T / L + c``), and a minibatch is a set of whole
sequences. Each sequence carries:

- ``state``: the memory the policy acted from at its first step (the collector stored it with every step,
  ``data.env_loop``; only the first of each sequence is kept);
- ``episode_start [., L]``: True at a step that begins an episode inside the sequence (the step after a
  terminated or truncated one), where the unroll zeroes the memory as acting did. At a sequence's first step
  it is False: the stored memory is already the reset one there.

``next_state`` (the memory after each step, which GAE bootstraps from) is dropped: learning does not use it.
Sequences never cross from one env to another; they do cross episode ends, which the flags mark (as in
CleanRL's ``ppo_atari_lstm.py``; SB3-contrib pads episodes into sequences instead).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

import torch

from .obs import Obs, map_leaves

__all__ = ["to_sequences", "check_seq_len", "SequenceError"]


class SequenceError(ValueError):
    """A sequence length that does not fit the rollout."""


def to_sequences(fields: Mapping[str, Obs], seq_len: int) -> Dict[str, Obs]:
    """The ``[T, E]`` fields of a rollout as ``[E * T / seq_len, seq_len]`` sequences (module docstring).

    Args:
        fields: time-major tensors ``[T, E, ...]`` with ``terminated``, ``truncated`` and ``state``
            (``[T, E, ...]``, the memory before each step); a dictionary observation's fields are trees of
            them (``data.obs``), each leaf cut alike.
        seq_len: steps per sequence; must divide ``T``.

    Raises:
        SequenceError: ``seq_len`` does not divide ``T`` (or exceeds it), naming both and the fix.

    Examples:
        >>> T, E = 4, 2
        >>> done = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 1]], dtype=torch.bool)
        >>> seqs = to_sequences({"reward": torch.arange(8.).reshape(T, E), "terminated": done,
        ...                      "truncated": torch.zeros(T, E, dtype=torch.bool),
        ...                      "state": torch.arange(8.).reshape(T, E, 1)}, seq_len=2)
        >>> seqs["reward"].tolist()           # env 0's two sequences, then env 1's
        [[0.0, 2.0], [4.0, 6.0], [1.0, 3.0], [5.0, 7.0]]
        >>> seqs["state"].squeeze(-1).tolist()  # the memory before each sequence's first step
        [0.0, 4.0, 1.0, 5.0]
        >>> seqs["episode_start"].tolist()    # env 0's episode ended at step 1: step 2 starts one
        [[False, False], [False, False], [False, False], [False, False]]
        >>> to_sequences({"reward": torch.zeros(4, 1), "terminated": done[:, :1], "truncated": done[:, :1],
        ...               "state": torch.zeros(4, 1, 1)}, seq_len=4)["episode_start"].tolist()
        [[False, False, True, False]]
    """
    steps, envs = fields["terminated"].shape[:2]
    seq_len = check_seq_len(steps, envs, seq_len)
    chunks = steps // seq_len
    done = fields["terminated"].bool() | fields["truncated"].bool()
    episode_start = torch.zeros_like(done)
    episode_start[1:] = done[:-1]
    out: Dict[str, Any] = {}
    for key, value in fields.items():
        if key == "next_state":
            continue
        if key == "state":  # the memory before each sequence's first step: [chunks, E, ...] -> [E * chunks, ...]
            first = value[::seq_len]
            out[key] = first.transpose(0, 1).reshape((envs * chunks,) + tuple(first.shape[2:]))
            continue
        out[key] = _cut(value, chunks, seq_len)
    starts = _cut(episode_start, chunks, seq_len)
    starts[:, 0] = False  # the stored memory of a sequence's first step is the reset one already
    out["episode_start"] = starts
    return out


def check_seq_len(steps: int, envs: int, seq_len: int) -> int:
    """``seq_len`` as an int, checked to divide the ``steps`` per env of a collect of ``envs`` envs.

    Raises:
        SequenceError: it does not (or is longer than the rollout), naming both and the fix.
    """
    seq_len = int(seq_len)
    if seq_len < 1 or steps % seq_len:
        raise SequenceError(f"policy.learn.seq_len={seq_len} does not divide the {steps} steps per env of a collect "
                            f"(policy.collect.n_sample / env.collector_env_num): "
                            + ("a sequence cannot be longer than the rollout; " if seq_len > steps else "")
                            + f"set seq_len to a divisor of {steps}, or n_sample to a multiple of seq_len * "
                              f"collector_env_num ({max(seq_len, 1) * envs})")
    return seq_len


def _cut(value: Obs, chunks: int, seq_len: int) -> Obs:
    """``[T, E, ...]`` -> ``[E * chunks, seq_len, ...]``, env-major (every leaf of a tree)."""
    return map_leaves(lambda leaf: _cut_tensor(leaf, chunks, seq_len), value)


def _cut_tensor(value: torch.Tensor, chunks: int, seq_len: int) -> torch.Tensor:
    envs, rest = value.shape[1], tuple(value.shape[2:])
    return value.reshape((chunks, seq_len, envs) + rest).transpose(1, 2).transpose(0, 1).reshape(
        (envs * chunks, seq_len) + rest)
