"""``OptimizerStep.step``'s hold: a parameter held out of a step keeps its value and its Adam state even with a
gradient (DDP's backward gives the network a pass does not use a zero gradient, which Adam would move by its
momentum), and ``count=False`` leaves the update count."""
from __future__ import annotations

import copy

import torch

from policies.optim import OptimizerStep, zero_for_ddp


def _two_params():
    torch.manual_seed(0)
    a, b = torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(torch.randn(3))
    step = OptimizerStep.adam([[a], [b]], [dict(lr=0.1), dict(lr=0.1)], "test")
    step.step((a ** 2).sum() + (b ** 2).sum())  # both have moments now
    return a, b, step


def _adam_state(step, p):
    return {k: v.clone() for k, v in step.optimizer.state[p].items()}


def test_a_held_parameter_keeps_its_value_and_adam_state_under_a_zero_gradient():
    a, b, step = _two_params()
    free = copy.deepcopy((a, b, step))
    a_before, b_before, b_state = a.detach().clone(), b.detach().clone(), _adam_state(step, b)
    step.step((a ** 2).sum() + 0.0 * b.sum(), hold=[b], count=False)
    assert not torch.equal(a, a_before)
    assert torch.equal(b, b_before)
    assert all(torch.equal(v, b_state[k]) for k, v in step.optimizer.state[b].items())
    assert torch.equal(b.grad, torch.zeros(3))  # given back after the step
    assert step.updates == 1  # count=False: the first step's only
    # without the hold, the same zero gradient moves it (by its momentum)
    fa, fb, fstep = free
    fstep.step((fa ** 2).sum() + 0.0 * fb.sum())
    assert not torch.equal(fb, b_before) and fstep.updates == 2


def test_zero_for_ddp_is_zero_outside_ddp():
    a, _, _ = _two_params()
    assert zero_for_ddp(torch.nn.Linear(2, 2), [a]) == 0.0
