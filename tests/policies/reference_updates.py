"""The end check of a test that writes an update out by hand beside a policy's (TD3's and SAC's order tests): the
policy's networks equal the reference ones, and its optimizer's Adam state of each parameter equals that of the
reference Adam over the twin parameter."""
from __future__ import annotations

from typing import Iterable, Sequence, Tuple

import torch


Modules = Iterable[Tuple[torch.nn.Module, torch.nn.Module]]
Adams = Iterable[Tuple[torch.optim.Optimizer, Sequence[torch.Tensor], Sequence[torch.Tensor]]]


def assert_same_as_reference(policy, modules: Modules, adams: Adams, rtol: float) -> None:
    """``modules``: (the policy's module, its reference twin); ``adams``: (a reference Adam, the policy's
    parameters it stands for, the reference parameters it steps), in the same order."""
    for mine, theirs in modules:
        for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
            torch.testing.assert_close(p, q, rtol=rtol, atol=1e-6, msg=name)
    state = policy.optimizer_step.optimizer.state
    for adam, mine, theirs in adams:
        for p, q in zip(mine, theirs):
            for key in ("exp_avg", "exp_avg_sq", "step"):
                torch.testing.assert_close(state[p][key].float(), adam.state[q][key].float(), rtol=rtol, atol=1e-7)
