"""Client processes SIGKILLed mid-push, mid-stream, mid-checkpoint, and all at once (issue 5, item 1)."""

from __future__ import annotations

import pytest

from geofed_testing.procs import Reaper
from geofed_testing.reliability.client_faults import (
    all_clients_gone,
    client_killed_mid_checkpoint,
    client_killed_mid_push,
    client_killed_mid_stream,
)


@pytest.mark.parametrize("scenario", [client_killed_mid_push, client_killed_mid_stream, all_clients_gone],
                         ids=lambda f: f.__name__)
def test_client_fault_loses_nothing_and_federation_resumes(scenario, tmp_path, reaper):
    result = scenario(tmp_path, reaper)

    assert result.lost == 0 and result.twice == 0
    assert result.resume_s is not None and result.resume_s < 60
    print(f"{result.name}: resumed in {result.resume_s:.2f} s; {result.outcome}")


@pytest.fixture(scope="module")
def mid_checkpoint(tmp_path_factory):
    """One run of the mid-checkpoint scenario, shared by the two tests that read it."""
    with Reaper() as reaper:
        yield client_killed_mid_checkpoint(tmp_path_factory.mktemp("mid-checkpoint"), reaper)


def test_client_killed_mid_checkpoint_resumes_from_the_previous_one(mid_checkpoint):
    assert mid_checkpoint.lost == 0 and mid_checkpoint.twice == 0
    assert mid_checkpoint.details["temp_files_after_kill"], "the kill should land while the temp file exists"


def test_relaunched_client_leaves_no_partial_checkpoint_behind(mid_checkpoint):
    """A SIGKILL during `atomic_write` leaves `.latest.pt.*.tmp`; repeated preemptions must not pile them up."""
    assert mid_checkpoint.details["temp_files_after_relaunch"] == [], (
        "client_agent/training/checkpoint.py: CheckpointManager does not remove the temp file a SIGKILLed "
        f"atomic_write left: {mid_checkpoint.details['temp_files_after_relaunch']}"
    )
