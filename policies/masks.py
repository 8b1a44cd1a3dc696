"""Legal-action masks of discrete actions: what acting, the Q-learning target and the PPO distribution do with
one.

A mask is a ``[B, A]`` tensor (bool, or 0/1 of any dtype) under the key ``action_mask`` of a dictionary
observation: where PettingZoo and RLlib put it, and where ``data.action_masks`` moves gymnasium's
``info["action_mask"]`` (Taxi-v4's). It is no input feature (``policies.encoders`` skips it); the policies read
it with ``action_mask(obs)`` and use the functions here, which keep the semantics of sb3-contrib's
``MaskablePPO``:

- acting never picks an illegal action: greedy (``masked_argmax``), epsilon-greedy's random branch draws among
  the legal actions (``random_legal``) and sampling draws from ``masked_logits``;
- the Q-learning target takes the max over the legal next actions (``masked_argmax`` of the next state's
  values, then the taken value);
- PPO's distribution is masked in the loss too, so its entropy is over the legal actions only.

A state with no legal action at all (a final observation whose mask is all zeros, as PettingZoo gives for an
agent that is done) is treated as if every action were legal, so the arithmetic stays finite: its value is not
bootstrapped from (terminated) or its action not taken. Whether an env asks a policy to act in such a state is
not checked yet: ``rows_without_legal_action`` is what a collection's end would read, once (a check at each
step would read the device back to the host every step).

Examples:
    >>> q = torch.tensor([[1.0, 5.0, 3.0], [2.0, 1.0, 0.0]])
    >>> mask = torch.tensor([[True, False, True], [False, False, False]])
    >>> masked_argmax(q, mask).tolist()            # row 1 has no legal action: as if all were legal
    [2, 0]
    >>> random_legal(torch.tensor([0.0, 0.5, 0.99]), torch.tensor([[0, 1, 1, 0]] * 3)).tolist()
    [1, 2, 2]
"""
from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym

import torch

from data.action_masks import ACTION_MASK_KEY

from .spaces import SpaceMismatchError

__all__ = ["ACTION_MASK_KEY", "action_mask", "effective_mask", "masked_argmax", "masked_logits", "random_legal",
           "rows_without_legal_action", "check_mask_width", "observation_has_mask"]



def action_mask(obs: Any) -> Optional[torch.Tensor]:
    """The ``[B, A]`` bool mask of a dictionary observation (a tree with an ``action_mask`` key), or None for an
    observation without one (a plain tensor, or a tree without that key)."""
    if isinstance(obs, torch.Tensor) or not hasattr(obs, "keys") or ACTION_MASK_KEY not in obs.keys():
        return None
    mask = obs[ACTION_MASK_KEY]
    return mask if mask.dtype == torch.bool else mask != 0


def effective_mask(mask: torch.Tensor) -> torch.Tensor:
    """``mask`` with each row that has no legal action made all legal (the module docstring says why)."""
    return mask | ~mask.any(dim=-1, keepdim=True)


def masked_argmax(values: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """``argmax_a values[b, a]`` over the legal actions of each row (``[B, A]`` values; ``mask`` None: all legal)."""
    if mask is None:
        return values.argmax(dim=-1)
    return values.masked_fill(~effective_mask(mask), float("-inf")).argmax(dim=-1)


def masked_logits(logits: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """``logits`` with the illegal actions' set to the dtype's lowest finite value, so a categorical distribution
    over them gives those actions probability 0 and its entropy counts the legal ones only (a finite value,
    not ``-inf``: ``0 * log 0`` stays 0 in the entropy and in a gradient)."""
    if mask is None:
        return logits
    return logits.masked_fill(~effective_mask(mask), torch.finfo(logits.dtype).min)


def random_legal(u: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A uniformly random legal action per row, from ``u`` (``[B]`` uniform on [0, 1)): the k-th legal action
    with ``k = floor(u * n_legal)``, in one pass of tensor operations (no host read, no Python loop over rows)."""
    legal = effective_mask(mask)
    count = legal.sum(dim=-1)
    k = torch.minimum((u * count).long(), count - 1)  # u just below 1 may round up to count
    # the number of legal actions up to and including each action; the k-th legal one is the first where it is k+1
    return (legal.cumsum(dim=-1) <= k.unsqueeze(-1)).sum(dim=-1)


def rows_without_legal_action(mask: torch.Tensor) -> torch.Tensor:
    """The rows of ``mask`` with no legal action, as a ``[B]`` bool tensor (read once per collection)."""
    return ~mask.any(dim=-1)


def check_mask_width(mask: torch.Tensor, action_dim: int, where: str) -> None:
    """Refuse a mask whose width is not the number of actions, naming ``where`` it came from and the fix."""
    if mask.dim() < 1 or mask.shape[-1] != action_dim:
        raise ValueError(f"{where}: the action mask has shape {tuple(mask.shape)}, but the action space has "
                         f"{action_dim} actions: a mask holds one entry per action (1 or True: legal); check the "
                         f"env's action_mask, or the name it is read under (env.action_mask_key)")


def observation_has_mask(observation_space: gym.Space, action_space: gym.Space, policy: str) -> bool:
    """Whether the observations carry a legal-action mask (a Dict's top-level ``action_mask``): acting and the
    loss then use it.

    Raises:
        policies.spaces.SpaceMismatchError: a mask with continuous actions, or one whose width is not the number
            of actions.
    """
    spaces = getattr(observation_space, "spaces", None)
    if not isinstance(observation_space, gym.spaces.Dict) or ACTION_MASK_KEY not in spaces:
        return False
    if not isinstance(action_space, gym.spaces.Discrete):
        raise SpaceMismatchError(
            f"policy {policy}: the observations carry an action mask (observation[{ACTION_MASK_KEY!r}]), which marks "
            f"the legal ones of discrete actions, but the action space is {action_space}: a continuous action is not "
            f"masked. Drop the mask from the observations (env.action_mask_key='', or "
            f"gymnasium.wrappers.FilterObservation), or use a Discrete action space")
    shape = tuple(spaces[ACTION_MASK_KEY].shape or ())
    if shape != (int(action_space.n),):
        raise SpaceMismatchError(
            f"policy {policy}: observation[{ACTION_MASK_KEY!r}] has shape {shape}, but the action space "
            f"{action_space} has {int(action_space.n)} actions: a mask holds one entry per action (1 or True: "
            f"legal); check the env's action_mask")
    return True
