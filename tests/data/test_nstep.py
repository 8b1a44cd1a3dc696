"""n-step targets against hand-computed values, with termination, truncation and env boundaries."""
from __future__ import annotations

import pytest
import torch

from data.nstep import NStepBuilder


def _chunk(rewards, terminated, truncated):
    """Time-major [T, E] chunk; obs of (t, e) is 10*t + e, next_obs is 10*(t+1) + e + 0.5 (a 'real' final obs)."""
    r = torch.tensor(rewards, dtype=torch.float32)
    t_len, envs = r.shape
    t = torch.arange(t_len).unsqueeze(1).float()
    e = torch.arange(envs).unsqueeze(0).float()
    obs = (10 * t + e).unsqueeze(-1)
    next_obs = (10 * (t + 1) + e + 0.5).unsqueeze(-1)
    return dict(obs=obs, action=torch.zeros(t_len, envs, dtype=torch.long), reward=r, next_obs=next_obs,
                terminated=torch.tensor(terminated), truncated=torch.tensor(truncated))


def _by_obs(out):
    return {float(o): i for i, o in enumerate(out["obs"].squeeze(-1))}


def test_nstep_one_is_passthrough_with_gamma():
    b = NStepBuilder(1, 0.9)
    out = b.push(_chunk([[1.0], [2.0]], [[False], [True]], [[False], [False]]))
    assert out["reward"].tolist() == [1.0, 2.0]
    assert out["discount"].tolist() == pytest.approx([0.9, 0.9])
    assert out["terminated"].tolist() == [False, True]


def test_nstep_three_hand_computed_with_termination():
    g = 0.5
    b = NStepBuilder(3, g)
    # one env: rewards 1, 2, 4, 8, 16; terminates at step 2 (third step); a new episode from step 3
    out = b.push(_chunk([[1.], [2.], [4.], [8.], [16.]],
                        [[False], [False], [True], [False], [False]],
                        [[False], [False], [False], [False], [False]]))
    idx = _by_obs(out)
    assert sorted(idx) == [0.0, 10.0, 20.0]  # steps 3 and 4 wait for their windows
    s0, s1, s2 = out["reward"][idx[0.0]], out["reward"][idx[10.0]], out["reward"][idx[20.0]]
    assert s0 == pytest.approx(1 + g * 2 + g * g * 4)
    assert s1 == pytest.approx(2 + g * 4)          # window stops at the terminal step
    assert s2 == pytest.approx(4)
    assert out["terminated"].tolist() == [True, True, True]
    assert out["discount"][idx[0.0]] == pytest.approx(g ** 3)
    assert out["discount"][idx[10.0]] == pytest.approx(g ** 2)
    assert out["discount"][idx[20.0]] == pytest.approx(g)
    # every window ends at the terminal step's real next observation
    assert out["next_obs"].squeeze(-1).tolist() == [30.5, 30.5, 30.5]


def test_nstep_truncation_bootstraps_from_real_final_obs():
    g = 0.9
    b = NStepBuilder(2, g)
    out = b.push(_chunk([[1.], [1.], [1.]], [[False], [False], [False]], [[False], [True], [False]]))
    idx = _by_obs(out)
    first, second = idx[0.0], idx[10.0]
    assert out["reward"][first] == pytest.approx(1 + g)
    assert not out["terminated"][first] and out["truncated"][first]
    assert out["next_obs"][first].item() == 20.5  # the real final obs of the truncated episode
    assert out["discount"][first] == pytest.approx(g ** 2)
    assert out["reward"][second] == pytest.approx(1.0) and out["discount"][second] == pytest.approx(g)
    assert out["truncated"][second] and not out["terminated"][second]


def test_nstep_never_crosses_env_boundary():
    b = NStepBuilder(2, 1.0)
    # env 0 always rewards 1, env 1 always 100: a window mixing them would show 101
    out = b.push(_chunk([[1., 100.], [1., 100.], [1., 100.]], [[False, False]] * 3, [[False, False]] * 3))
    assert sorted(out["reward"].tolist()) == [2.0, 2.0, 200.0, 200.0]
    for o, nxt in zip(out["obs"].squeeze(-1), out["next_obs"].squeeze(-1)):
        assert int(o) % 10 == int(nxt) % 10  # same env index


def test_nstep_windows_span_chunks():
    g = 0.5
    whole = NStepBuilder(3, g).push(_chunk([[1.], [2.], [3.], [4.]], [[False]] * 4, [[False]] * 4))
    split = NStepBuilder(3, g)
    part1 = split.push(_chunk([[1.], [2.]], [[False]] * 2, [[False]] * 2))
    assert part1 == {}
    c2 = _chunk([[1.], [2.], [3.], [4.]], [[False]] * 4, [[False]] * 4)
    part2 = split.push({k: v[2:] for k, v in c2.items()})
    assert torch.allclose(part2["reward"], whole["reward"])
    assert torch.equal(part2["next_obs"], whole["next_obs"])


def test_nstep_rejects_bad_arguments():
    with pytest.raises(ValueError, match="nstep"):
        NStepBuilder(0, 0.9)
    with pytest.raises(ValueError, match="discount_factor"):
        NStepBuilder(1, 1.5)


# ---- how long a window may be (issue 34: policy.nstep=1000000000 was a MemoryError after 32 s) -------------
def test_useful_horizon_is_where_the_discount_falls_below_float32_resolution():
    from data.nstep import useful_horizon
    for gamma in (0.5, 0.9, 0.99, 0.999):
        horizon = useful_horizon(gamma)
        assert gamma ** horizon < 2.0 ** -24 <= gamma ** (horizon - 1)
        # past the horizon a step changes nothing a float32 sum of rewards of its size holds
        assert torch.tensor(1.0) + torch.tensor(gamma ** horizon) == torch.tensor(1.0)
    assert useful_horizon(1.0) is None and useful_horizon(0.0) == 1


def test_check_nstep_names_the_bound_that_binds_and_accepts_what_fits():
    from data.nstep import MAX_SPAN, check_nstep
    from engine.config import ConfigError
    check_nstep(MAX_SPAN, 0.99, episode_limit=500)
    check_nstep(50, 0.99, episode_limit=50)
    with pytest.raises(ConfigError, match=r"policy.nstep=256: .*one byte.*Give policy.nstep <= 255 "):
        check_nstep(256, 1.0)
    with pytest.raises(ConfigError, match=r"episodes end by step 50 .*Give policy.nstep <= 50 "):
        check_nstep(51, 0.99, episode_limit=50, env_id="CartPole-v1")
    with pytest.raises(ConfigError, match=r"discount_factor=0.5 a reward 25 or more.*Give policy.nstep <= 25 "):
        check_nstep(26, 0.5, episode_limit=500)
    with pytest.raises(ConfigError, match=r"carry 999,999,999 steps of each of the 8 collector envs"):
        check_nstep(10**9, 0.99, num_envs=8)


def test_the_builder_refuses_a_window_its_span_cannot_record():
    from data.nstep import MAX_SPAN
    NStepBuilder(MAX_SPAN, 0.99)
    with pytest.raises(ValueError, match=r"policy.nstep=256: .*longest window"):
        NStepBuilder(MAX_SPAN + 1, 0.99)


def test_a_window_of_max_span_records_its_span():
    from data.nstep import MAX_SPAN
    steps = MAX_SPAN + 3
    b = NStepBuilder(MAX_SPAN, 1.0)
    out = b.push(_chunk([[1.0]] * steps, [[False]] * steps, [[False]] * steps))
    assert out["span"].tolist() == [MAX_SPAN] * 4 and out["reward"].tolist() == [float(MAX_SPAN)] * 4
