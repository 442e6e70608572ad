"""Attempt classification, the relaunch decision and the backoff policy (pure, no cluster)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from geofed_operator.attempts import (
    AttemptState,
    Backoff,
    BackoffPolicy,
    Finish,
    Launch,
    Observe,
    Outcome,
    SiteState,
    classify_attempt,
    decide,
)

T0 = dt.datetime(2025, 1, 1, 12, 0, tzinfo=dt.UTC)
JOB: dict[str, Any] = {"metadata": {"name": "gpu0-1"}, "status": {}}


def pod(phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "gpu0-1-abc"}, "status": {"phase": phase, **status}}


@pytest.mark.parametrize(
    ("job", "pods", "outcome", "reason"),
    [
        (None, [], Outcome.MISSING, "JobMissing"),
        (JOB, [], Outcome.PENDING, "Pending"),
        (JOB, [pod("Pending", containerStatuses=[{"name": "c", "state": {"waiting": {"reason": "ImagePullBackOff"}}}])],
         Outcome.PENDING, "ImagePullBackOff"),
        (JOB, [pod("Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])],
         Outcome.PENDING, "Unschedulable"),
        (JOB, [pod("Running", startTime="2025-01-01T11:00:00Z")], Outcome.RUNNING, "Running"),
        (JOB, [pod("Failed", reason="Evicted", message="low on memory")], Outcome.FAILED, "Evicted"),
        (JOB, [pod("Failed", containerStatuses=[{"name": "c", "state": {"terminated": {"reason": "OOMKilled",
                                                                                     "exitCode": 137}}}])],
         Outcome.FAILED, "OOMKilled"),
        (JOB, [pod("Running", conditions=[{"type": "DisruptionTarget", "status": "True",
                                            "reason": "PreemptionByScheduler", "message": "preempted"}])],
         Outcome.FAILED, "PreemptionByScheduler"),
        (JOB, [pod("Running", conditions=[{"type": "DisruptionTarget", "status": "True",
                                            "reason": "DeletionByTaintManager", "message": "node lost"}])],
         Outcome.FAILED, "DeletionByTaintManager"),
        ({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}, [],
         Outcome.FAILED, "BackoffLimitExceeded"),
        ({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}, [], Outcome.SUCCEEDED, "Completed"),
        (JOB, [pod("Succeeded")], Outcome.SUCCEEDED, "Completed"),
    ],
)  # fmt: skip
def test_classify_attempt(job: Any, pods: list[dict[str, Any]], outcome: Outcome, reason: str) -> None:
    state = classify_attempt(job, pods)
    assert (state.outcome, state.reason) == (outcome, reason)


def test_running_attempt_reports_its_start_time() -> None:
    state = classify_attempt(JOB, [pod("Running", startTime="2025-01-01T11:00:00Z")])
    assert state.started_at == dt.datetime(2025, 1, 1, 11, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("policy", "failures", "delay"),
    [
        (BackoffPolicy(10, 600), 1, 10),
        (BackoffPolicy(10, 600), 2, 20),
        (BackoffPolicy(10, 600), 4, 80),
        (BackoffPolicy(10, 600), 50, 600),
        (BackoffPolicy(0, 600), 3, 0),
    ],
)
def test_backoff_doubles_up_to_the_cap(policy: BackoffPolicy, failures: int, delay: float) -> None:
    assert policy.delay(failures) == delay


POLICY = BackoffPolicy(initial_s=10, max_s=600, reset_after_s=600, max_restarts=3)
FAILED = AttemptState(Outcome.FAILED, "Evicted", "low on memory")
RUNNING = AttemptState(Outcome.RUNNING, "Running", "", T0)


@pytest.mark.parametrize(
    ("state", "observed", "generation", "expected"),
    [
        (SiteState(), None, 1, Launch(1, counts_restart=False, reason="Created")),
        (SiteState(phase="Running", attempt=1, attempt_generation=1), RUNNING, 1,
         Observe("Running", "Running", "", T0)),
        (SiteState(phase="Running", attempt=1, attempt_generation=1), RUNNING, 2,
         Launch(2, counts_restart=False, reason="SpecChanged", replace=True)),
        (SiteState(phase="Running", attempt=1, attempt_generation=1, consecutive_failures=1), FAILED, 1,
         Backoff(T0 + dt.timedelta(seconds=20), 2, "Evicted", "low on memory")),
        (SiteState(phase="Running", attempt=1, consecutive_failures=5, running_since=T0 - dt.timedelta(hours=1)),
         FAILED, 1, Backoff(T0 + dt.timedelta(seconds=10), 1, "Evicted", "low on memory")),
        (SiteState(phase="Backoff", attempt=2, restarts=1, next_launch_at=T0 - dt.timedelta(seconds=1)), FAILED, 1,
         Launch(3, counts_restart=True, reason="Relaunch")),
        (SiteState(phase="Backoff", attempt=2, next_launch_at=T0 + dt.timedelta(seconds=30)), FAILED, 1,
         Observe("Backoff", "Backoff", "relaunching attempt 3 in 30s")),
        (SiteState(phase="Running", attempt=4, restarts=3), FAILED, 1,
         Finish("Failed", "RestartLimit", "gave up after 3 restarts; last: Evicted: low on memory")),
        (SiteState(phase="Running", attempt=1), AttemptState(Outcome.SUCCEEDED, "Completed", "done"), 1,
         Finish("Succeeded", "Completed", "done")),
        (SiteState(phase="Succeeded", attempt=1), FAILED, 1,
         Observe("Succeeded", "Finished", "the SiteClient has finished; delete and re-create it to run again")),
        (SiteState(phase="Degraded", attempt=1), AttemptState(Outcome.MISSING, "JobMissing", "gone"), 1,
         Backoff(T0 + dt.timedelta(seconds=10), 1, "JobMissing", "gone")),
    ],
)  # fmt: skip
def test_decide(state: SiteState, observed: AttemptState | None, generation: int, expected: Any) -> None:
    assert decide(state, observed, generation=generation, now=T0, policy=POLICY) == expected


def test_site_state_reads_camel_case_status() -> None:
    state = SiteState.from_status(
        {"phase": "Backoff", "attempt": 3, "restarts": 2, "consecutiveFailures": 2, "attemptGeneration": 4,
         "nextLaunchTime": "2025-01-01T12:00:30Z", "runningSince": None}
    )  # fmt: skip
    assert state == SiteState("Backoff", 3, 4, 2, 2, T0 + dt.timedelta(seconds=30), None)


def test_a_suspended_siteclient_resumes_with_a_new_attempt_that_is_no_restart() -> None:
    state = SiteState(phase="Suspended", attempt=3, attempt_generation=4, restarts=2)
    missing = AttemptState(Outcome.MISSING, "JobMissing", "stopped by suspend")
    decision = decide(state, missing, generation=5, now=T0, policy=BackoffPolicy())
    assert decision == Launch(4, counts_restart=False, reason="Resumed")
