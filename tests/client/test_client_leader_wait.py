"""Rank 0's long network waits do not time out the other ranks of a `torchrun` client."""

from __future__ import annotations

import json

import leader_wait_worker as worker
import pytest
from torchrun_launch import torchrun

from client_agent.training.leader_wait import leader_wait


def test_single_process_runs_the_work_directly():
    assert leader_wait(lambda: 7, leader=True, bcast=None) == 7


@pytest.mark.long
def test_a_wait_three_times_the_process_group_timeout_is_survived(tmp_path):
    # Execute: two gloo ranks, timeout 2 s, rank 0 busy 6 s (twice: once succeeding, once failing).
    proc = torchrun(worker.__file__, str(tmp_path / "seen"), cwd=tmp_path, timeout=120)

    # Assert
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    zero, one = (json.loads((tmp_path / f"seen.{r}.json").read_text()) for r in (0, 1))
    assert (zero["result"], one["result"]) == ("model", None)
    # Rank 1 really waited past the timeout: nearly WORK_S (3 x the timeout), less however much later than
    # rank 0 it reached the wait (a millisecond, or more under load); twice the timeout leaves that margin.
    assert one["waited_s"] > 2 * worker.TIMEOUT_S
    assert zero["after"] == one["after"] == 3  # and the process group still works
    assert (zero["failure"], one["failure"]) == ("ValueError", "LeaderFailedError")
    # Control: the same wait inside one plain collective does time out, so the test means something.
    assert one["plain"] == "timed out"


@pytest.mark.parametrize("poll_s", [0.01])
def test_leader_failure_is_raised_on_rank_zero_in_one_process(poll_s):
    """With a fake broadcast that records the states rank 0 sends."""
    sent = []

    def bcast(t):
        sent.append(int(t.item()))
        return t

    def work():
        raise KeyError("boom")

    with pytest.raises(KeyError):
        leader_wait(work, leader=True, bcast=bcast, poll_s=poll_s)
    assert sent[-1] == 2 and set(sent[:-1]) <= {0}
