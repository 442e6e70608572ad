"""The PS SIGKILLed mid-push and mid-round, restarted behind its clients or after a long outage, and
its checkpoint disk full (issue 5, item 1)."""

from __future__ import annotations

import pytest

from geofed_testing.reliability.ps_faults import (
    disk_full_while_checkpointing,
    ps_crash_strands_new_clients,
    ps_killed_mid_push,
    ps_killed_mid_round,
    ps_restarts_behind_clients,
)


def test_ps_killed_mid_push_restarts_from_checkpoint_and_loses_nothing(tmp_path, reaper):
    result = ps_killed_mid_push(tmp_path, reaper)

    assert result.lost == 0 and result.twice == 0
    print(f"{result.name}: resumed in {result.resume_s:.2f} s; {result.outcome}")


def test_ps_killed_mid_round_keeps_the_accepted_delta(tmp_path, reaper):
    result = ps_killed_mid_round(tmp_path, reaper)

    assert result.lost == 0


def test_ps_stopped_gracefully_mid_round_keeps_the_accepted_delta(tmp_path, reaper):
    """SIGTERM (a Kubernetes roll), not SIGKILL: the final checkpoint must not swallow the buffered delta."""
    result = ps_killed_mid_round(tmp_path, reaper, graceful=True)

    assert result.lost == 0, result.outcome


def test_client_that_joined_after_the_last_checkpoint_gets_back_in(tmp_path, reaper):
    result = ps_crash_strands_new_clients(tmp_path, reaper)

    assert result.outcome == "client rejoined"


@pytest.mark.long
def test_clients_ride_out_a_27_s_ps_outage_and_resume_promptly(tmp_path, reaper):
    """A PS rescheduled elsewhere is down for tens of seconds: no push may be given up or lost, and clients
    must be pushing again within their own retry cadence once it is back."""
    result = ps_killed_mid_push(tmp_path, reaper, downtime_s=27.0, n_clients=1, rounds=3)

    assert result.lost == 0 and result.twice == 0
    assert result.details["resume_after_ps_back_s"] <= 13.0


def test_client_resyncs_when_the_ps_restarts_behind_it(tmp_path, reaper):
    result = ps_restarts_behind_clients(tmp_path, reaper)

    assert "resynced" in result.outcome


def test_disk_full_while_checkpointing_keeps_serving_and_the_old_checkpoint(tmp_path, reaper):
    result = disk_full_while_checkpointing(tmp_path, reaper)

    assert result.details["checkpoint_failures"] >= 2
    print(f"{result.name} [{result.injected}]: {result.outcome}")
