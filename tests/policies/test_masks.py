"""Legal-action masks (issue 31, item 3): acting never picks an illegal action, greedy, epsilon-greedy and
sampled alike; the Q target's max is over legal next actions; a masked distribution's entropy is over the legal
actions (sb3-contrib MaskablePPO's semantics); a state with no legal action stays finite."""
from __future__ import annotations

import pytest
import torch

from data.batch import ttorch
from policies.epsilon import EpsilonDraws
from policies.masks import (action_mask, check_mask_width, effective_mask, masked_argmax, masked_logits, random_legal,
                            rows_without_legal_action)
from policies.placement import DeviceGenerators


def _random_masks(rows: int, actions: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(rows, actions, generator=g) < 0.4
    mask[torch.arange(rows), torch.randint(actions, (rows,), generator=g)] = True  # at least one legal each
    return mask


def test_action_mask_is_read_from_a_tree_and_only_from_one():
    obs = ttorch.Tensor({"obs": torch.zeros(2, 3), "action_mask": torch.tensor([[1, 0], [0, 1]], dtype=torch.int8)})
    assert action_mask(obs).tolist() == [[True, False], [False, True]]
    assert action_mask(torch.zeros(2, 3)) is None
    assert action_mask(ttorch.Tensor({"obs": torch.zeros(2, 3)})) is None


def test_greedy_never_picks_an_illegal_action():
    mask = _random_masks(500, 6)
    q = torch.randn(500, 6) * 10
    chosen = masked_argmax(q, mask)
    assert mask[torch.arange(500), chosen].all()
    best_legal = q.masked_fill(~mask, float("-inf")).max(dim=1).values
    assert torch.equal(q[torch.arange(500), chosen], best_legal)
    assert torch.equal(masked_argmax(q, None), q.argmax(dim=1))


def test_random_legal_draws_every_legal_action_uniformly_and_no_other():
    mask = torch.tensor([[True, False, True, True, False]]).expand(30_000, 5)
    drawn = random_legal(torch.rand(30_000, generator=torch.Generator().manual_seed(1)), mask)
    counts = torch.bincount(drawn, minlength=5).float() / 30_000
    assert counts[1] == 0 and counts[4] == 0
    assert torch.allclose(counts[[0, 2, 3]], torch.full((3,), 1 / 3), atol=0.015)
    assert random_legal(torch.tensor([0.9999999]), torch.tensor([[False, True, False]])).item() == 1


def test_epsilon_greedy_explores_among_legal_actions_only():
    torch.manual_seed(0)
    draws = EpsilonDraws(DeviceGenerators(), action_dim=6)
    mask = _random_masks(64, 6, seed=3)
    greedy = masked_argmax(torch.randn(64, 6), mask)
    seen_random = 0
    for _ in range(200):
        acted = draws.apply(greedy, eps=0.5, mask=mask)
        assert mask[torch.arange(64), acted].all()
        seen_random += int((acted != greedy).sum())
    assert seen_random > 1000  # it does explore (about half the rows, less the draws equal to the greedy one)
    always = draws.apply(greedy, eps=1.0, mask=mask)
    assert mask[torch.arange(64), always].all()


def test_masked_distribution_samples_legal_actions_and_its_entropy_counts_only_them():
    mask = torch.tensor([[True, False, True, False], [True, True, True, True]])
    logits = torch.zeros(2, 4, requires_grad=True)
    dist = torch.distributions.Categorical(logits=masked_logits(logits, mask))
    samples = dist.sample((2000,))
    assert mask[0, samples[:, 0]].all()
    assert torch.allclose(dist.entropy(), torch.log(torch.tensor([2.0, 4.0])))
    dist.log_prob(torch.tensor([2, 1])).sum().backward()
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[0, 1] == 0 and logits.grad[0, 3] == 0  # no gradient reaches an illegal action's logit


def test_a_state_without_a_legal_action_stays_finite():
    """A final observation with an all-zero mask (PettingZoo's done agent): its value is not bootstrapped from,
    but the arithmetic must not turn it into NaN (-inf * 0)."""
    mask = torch.tensor([[False, False, False], [True, False, False]])
    q = torch.tensor([[1.0, 3.0, 2.0], [1.0, 3.0, 2.0]])
    assert masked_argmax(q, mask).tolist() == [1, 0]
    assert torch.isfinite(torch.distributions.Categorical(logits=masked_logits(q, mask)).entropy()).all()
    assert effective_mask(mask)[0].all() and rows_without_legal_action(mask).tolist() == [True, False]


def test_a_mask_of_the_wrong_width_is_named():
    check_mask_width(torch.ones(4, 6, dtype=torch.bool), 6, "env Taxi-v4")
    with pytest.raises(ValueError, match=r"env Taxi-v4: the action mask has shape \(4, 5\), but the action space "
                                         r"has 6 actions"):
        check_mask_width(torch.ones(4, 5, dtype=torch.bool), 6, "env Taxi-v4")
