"""PPO's means over the elements that count (several agents per row, ``policies.advantages``) under DDP: ranks
whose minibatches hold different numbers of acting agents update as one process on the joined batch."""
from __future__ import annotations

import json

import pytest
import torch

import ddp_workers
from engine import launch
from policies.advantages import mean_shares, normalise_advantages, weighted_mean

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]


def test_ranks_with_different_acting_counts_get_the_joined_batchs_gradient(tmp_path):
    launch(ddp_workers.weighted_loss_run, nprocs=2, args=(str(tmp_path),), timeout=30.0)
    grads = [json.load(open(tmp_path / f"weighted_rank{r}.json"))["grad"] for r in range(2)]
    assert grads[0] == grads[1]

    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    x = torch.cat([torch.arange(16, dtype=torch.float32).reshape(2, 4, 2)[r] * (1 + r) for r in range(2)])
    weight = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    adv = normalise_advantages(torch.tensor([1.0, 2.0, 3.0, 50.0, -9.0, 4.0, -7.0, 8.0]), weight)
    weighted_mean(model(x).squeeze(-1) * adv, mean_shares(weight)).backward()
    for got, want in zip(grads[0], model.parameters()):
        assert torch.allclose(torch.tensor(got), want.grad.flatten(), atol=1e-6)


def test_one_advantage_normalises_to_zero_not_nan():
    """A rollout's last minibatch may hold one transition (n_sample rounded up to whole vector steps): no
    deviation, so 0, as the weighted path gives, not ``Tensor.std``'s NaN (a loss of NaN, a run stopped)."""
    assert torch.equal(normalise_advantages(torch.tensor([3.0])), torch.tensor([0.0]))
    assert torch.equal(normalise_advantages(torch.tensor([3.0]), torch.tensor([1.0])), torch.tensor([0.0]))
    torch.testing.assert_close(normalise_advantages(torch.tensor([1.0, 3.0])), torch.tensor([-0.7071, 0.7071]),
                               rtol=0, atol=1e-4)
