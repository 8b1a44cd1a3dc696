"""A rank that is stuck, raises, is killed, or makes another collective than its peers: every process
ends, and the error names the rank at fault (2 real gloo processes, short timeouts)."""
from __future__ import annotations

import time

import pytest

import ddp_workers
from engine import launch
from engine.distributed import DistributedError

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]


@pytest.mark.parametrize("kind,sides", [
    ("op", r"rank 0 called step \d+: all_gather_rows\(2 float64\); rank 1 called step \d+: broadcast_object"),
    ("shape", r"rank 0 called step \d+: all_gather_rows\(1 float64\); rank 1 called step \d+: all_gather_rows\(2 "),
])
def test_mismatched_collectives_raise_on_every_rank_naming_both_sides(kind, sides, tmp_path):
    start = time.monotonic()
    with pytest.raises(DistributedError, match=f"(?s)the ranks disagree on the collective to make.*{sides}"):
        launch(ddp_workers.mismatched_collectives, nprocs=2, args=(str(tmp_path), kind), timeout=100)
    # found at once, not by the 100 s timeout (the bound leaves room for the starts on a loaded machine)
    assert time.monotonic() - start < 60


def test_a_hung_rank_is_named_by_the_rank_that_waited(tmp_path):
    start = time.monotonic()
    # the headline leads with the rank at fault, not with rank 0, whose collective failed on it first
    with pytest.raises(DistributedError, match=r"(?s)^rank 1 of 2 stopped or fell behind \(root cause, named by rank 0"
                                               r".*At fault: rank 1 fell behind.*rank 1 at 'iteration 3'"):
        launch(ddp_workers.failing_pipeline, nprocs=2, args=(str(tmp_path), "hang"), timeout=5)
    # by the 5 s timeout given, not the 90 s default (the rest is two starts, slow on a loaded machine)
    assert time.monotonic() - start < 5 + 60


def test_a_killed_rank_is_named(tmp_path):
    start = time.monotonic()
    with pytest.raises(DistributedError, match=r"rank 1 of 2 was killed \(SIGKILL\) \(root cause\)"):
        launch(ddp_workers.failing_pipeline, nprocs=2, args=(str(tmp_path), "kill"), timeout=30)
    assert time.monotonic() - start < 60


def test_a_raising_rank_is_named(tmp_path):
    start = time.monotonic()
    with pytest.raises(DistributedError, match=r"(?s)rank 1 of 2 failed first.*rank 1 raised on purpose"):
        launch(ddp_workers.failing_pipeline, nprocs=2, args=(str(tmp_path), "raise"), timeout=30)
    assert time.monotonic() - start < 60
