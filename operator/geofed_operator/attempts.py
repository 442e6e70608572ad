"""A SiteClient's launch attempts: classify what the current one is doing, decide what to do next.

Pure functions over the Job and pod dicts and the SiteClient's status. A failed, evicted or preempted
attempt leads to a new attempt with a new one-time token after a backoff (paper §III-B4: a preempted
client rejoins with a single RPC); a completed run ends the SiteClient.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from geofed_operator import names
from geofed_operator.conditions import parse_time
from geofed_operator.pod_problems import failed_create, waiting_problem
from geofed_operator.siteclient_spec import BackoffSpec


class Outcome(enum.Enum):
    """Where an attempt stands."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    MISSING = "Missing"


@dataclass(frozen=True)
class AttemptState:
    """An attempt's outcome with the reason and message shown in status."""

    outcome: Outcome
    reason: str = ""
    message: str = ""
    started_at: dt.datetime | None = None


def _true(conditions: Sequence[Mapping[str, Any]] | None, kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions or () if c.get("type") == kind and c.get("status") == "True"), None)


def pod_disruption(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) if the pod is being taken away: its DisruptionTarget condition, set by the
    scheduler (preemption), the eviction API, the taint manager or the kubelet."""
    name = (pod.get("metadata") or {}).get("name", "pod")
    disruption = _true((pod.get("status") or {}).get("conditions"), "DisruptionTarget")
    if disruption is None:
        return None
    return disruption.get("reason") or "Disrupted", f"{name}: {disruption.get('message', 'disrupted')}"


def disruption_annotation(reason: str, message: str) -> dict[str, str]:
    """The Job annotation that keeps a disruption once the pod object is gone."""
    return {names.ANNOTATION_DISRUPTION: json.dumps({"reason": reason, "message": message[:1024]})}


def recorded_disruption(job: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of a disruption recorded on the Job by `disruption_annotation`, if any."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_DISRUPTION)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("reason"), str) or not value["reason"]:
        return None
    return value["reason"], str(value.get("message") or "")


def _pod_failure(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) if the pod failed or is being taken away (eviction, preemption, node loss)."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "pod")
    disruption = pod_disruption(pod)
    if disruption is not None:
        return disruption
    if status.get("phase") != "Failed":
        return None
    reason = status.get("reason") or ""
    message = status.get("message") or ""
    for cs in status.get("containerStatuses") or ():
        term = (cs.get("state") or {}).get("terminated") or {}
        if term:
            said = _last_line(term.get("message") or "")
            known = next((r for r in CLIENT_REASONS if f"{r}:" in said), None)
            known = known or next((r for phrase, r in CLIENT_PHRASES.items() if phrase in said), None)
            reason = reason or known or term.get("reason") or "Error"
            exited = f"container {cs.get('name')} exited with code {term.get('exitCode')}"
            message = message or (f"{exited}: {said}" if said else exited)
    return reason or "PodFailed", f"{name}: {message or 'failed'}"


# Reasons the client states on its last line when it gives up (client_agent: "NoGlobalModel: ...").
CLIENT_REASONS = ("NoGlobalModel",)
# Phrases of the client's last line that name a reason (client_agent.connection.ps_client's JoinError text).
CLIENT_PHRASES = {"the parameter server refused this client": "JoinRefused"}
# Failures no relaunch fixes until someone changes a spec (an unknown PS group, another paradigm):
# reported as Degraded while the backoff keeps retrying.
CONFIG_REASONS = ("JoinRefused",)


def _last_line(text: str) -> str:
    """The last non-empty line of a termination message (FallbackToLogsOnError: the log's tail)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:1024] if lines else ""


def classify_attempt(
    job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]] = ()
) -> AttemptState:
    """What one attempt's Job, pods and the Job's events say: succeeded, failed (and why), running, pending, gone."""
    if job is None:
        return AttemptState(Outcome.MISSING, "JobMissing", "the attempt's Job is gone (deleted or garbage-collected)")
    status = job.get("status") or {}
    if _true(status.get("conditions"), "Complete") or _true(status.get("conditions"), "SuccessCriteriaMet"):
        return AttemptState(Outcome.SUCCEEDED, "Completed", "the client finished its run")
    if any((p.get("status") or {}).get("phase") == "Succeeded" for p in pods):
        return AttemptState(Outcome.SUCCEEDED, "Completed", "the client finished its run")
    failures = [f for f in map(_pod_failure, pods) if f is not None]
    if failures:
        return AttemptState(Outcome.FAILED, *failures[0])
    recorded = recorded_disruption(job)  # the pod was taken away and its object is gone already
    if recorded is not None:
        return AttemptState(Outcome.FAILED, *recorded)
    failed = _true(status.get("conditions"), "Failed") or _true(status.get("conditions"), "FailureTarget")
    if failed is not None:
        return AttemptState(Outcome.FAILED, failed.get("reason") or "JobFailed", failed.get("message", "Job failed"))
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if running:
        started = parse_time((running[0].get("status") or {}).get("startTime"))
        return AttemptState(Outcome.RUNNING, "Running", "the client pod is running", started)
    for pod in pods:
        problem = waiting_problem(pod)
        if problem is not None:
            return AttemptState(Outcome.PENDING, *problem)
    refused = failed_create(events) if not pods else None
    if refused is not None:
        return AttemptState(Outcome.PENDING, refused[0], f"the Job cannot create its pod: {refused[1]}")
    if (job.get("spec") or {}).get("suspend") and not pods:
        return AttemptState(Outcome.PENDING, *_queued(job))
    return AttemptState(Outcome.PENDING, "Pending", "waiting for the client pod to start")


def _queued(job: Mapping[str, Any]) -> tuple[str, str]:
    """Why a suspended Job has no pod: it waits for Kueue's admission (the operator never suspends a Job)."""
    queue = ((job.get("metadata") or {}).get("labels") or {}).get(names.LABEL_KUEUE_QUEUE)
    if queue:
        return "Queued", f"the Job waits, suspended, until Kueue admits it from LocalQueue {queue!r}"
    return "JobSuspended", "the Job is suspended (by someone other than the operator): no pod starts until it resumes"


@dataclass(frozen=True)
class BackoffPolicy:
    """initial * 2^(n-1) seconds before relaunching after the n-th failure in a row, capped at max."""

    initial_s: float = 10.0
    max_s: float = 600.0
    reset_after_s: float = 600.0
    max_restarts: int = 0

    @classmethod
    def from_spec(cls, spec: BackoffSpec) -> BackoffPolicy:
        """From a SiteClient's `backoff` section."""
        return cls(spec.initial_s, spec.max_s, spec.reset_after_s, spec.max_restarts)

    def delay(self, consecutive_failures: int) -> float:
        """Seconds to wait after the `consecutive_failures`-th failure in a row (1-based)."""
        exponent = max(0, consecutive_failures - 1)
        return min(self.max_s, self.initial_s * 2.0 ** min(exponent, 62))


@dataclass(frozen=True)
class SiteState:
    """The decision-relevant part of a SiteClient's status."""

    phase: str | None = None
    attempt: int = 0
    attempt_generation: int | None = None
    restarts: int = 0
    consecutive_failures: int = 0
    next_launch_at: dt.datetime | None = None
    running_since: dt.datetime | None = None

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> SiteState:
        """From a SiteClient's camelCase `.status`."""
        s = status or {}
        return cls(
            phase=s.get("phase"),
            attempt=int(s.get("attempt") or 0),
            attempt_generation=s.get("attemptGeneration"),
            restarts=int(s.get("restarts") or 0),
            consecutive_failures=int(s.get("consecutiveFailures") or 0),
            next_launch_at=parse_time(s.get("nextLaunchTime")),
            running_since=parse_time(s.get("runningSince")),
        )


@dataclass(frozen=True)
class Launch:
    """Start attempt `attempt` with a fresh token; `replace` the current one first (spec change)."""

    attempt: int
    counts_restart: bool
    reason: str
    replace: bool = False


@dataclass(frozen=True)
class Backoff:
    """The current attempt failed: wait until `until`, then launch the next one."""

    until: dt.datetime
    consecutive_failures: int
    reason: str
    message: str


@dataclass(frozen=True)
class Finish:
    """Terminal: Succeeded (the run completed) or Failed (restart limit reached)."""

    phase: str
    reason: str
    message: str


@dataclass(frozen=True)
class Observe:
    """Nothing to do but report: the attempt is pending, running, or waiting out its backoff."""

    phase: str
    reason: str
    message: str
    running_since: dt.datetime | None = None


Decision = Launch | Backoff | Finish | Observe
TERMINAL = ("Succeeded", "Failed")


def decide(
    state: SiteState,
    observed: AttemptState | None,
    *,
    generation: int,
    now: dt.datetime,
    policy: BackoffPolicy,
) -> Decision:
    """The next step for a SiteClient, from its status and what its current attempt is doing."""
    if state.phase in TERMINAL:
        return Observe(state.phase, "Finished", "the SiteClient has finished; delete and re-create it to run again")
    if state.attempt == 0 or observed is None:
        return Launch(1, counts_restart=False, reason="Created")
    if state.phase == "Suspended":  # resumed: the stopped attempt is not a failure
        return Launch(state.attempt + 1, counts_restart=False, reason="Resumed")
    # A relaunch that was due and then blocked (Degraded) keeps its nextLaunchTime: retry it.
    if state.phase == "Backoff" or (state.phase == "Degraded" and state.next_launch_at is not None):
        if state.next_launch_at is None or now >= state.next_launch_at:
            return Launch(state.attempt + 1, counts_restart=True, reason="Relaunch")
        wait = (state.next_launch_at - now).total_seconds()
        return Observe("Backoff", "Backoff", f"relaunching attempt {state.attempt + 1} in {wait:.0f}s")
    if observed.outcome is Outcome.SUCCEEDED:
        return Finish("Succeeded", observed.reason, observed.message)
    # Before failures: replacing an attempt deletes its Job, which must not count as a failure.
    if state.attempt_generation is not None and generation != state.attempt_generation:
        return Launch(state.attempt + 1, counts_restart=False, reason="SpecChanged", replace=True)
    if observed.outcome in (Outcome.FAILED, Outcome.MISSING):
        if policy.max_restarts and state.restarts >= policy.max_restarts:
            return Finish(
                "Failed",
                "RestartLimit",
                f"gave up after {state.restarts} restarts; last: {observed.reason}: {observed.message}",
            )
        ran_for = (now - state.running_since).total_seconds() if state.running_since else 0.0
        ran_long = state.running_since is not None and ran_for >= policy.reset_after_s
        streak = 1 if ran_long else state.consecutive_failures + 1
        until = now + dt.timedelta(seconds=policy.delay(streak))
        return Backoff(until, streak, observed.reason, observed.message)
    phase = "Running" if observed.outcome is Outcome.RUNNING else "Launching"
    return Observe(phase, observed.reason, observed.message, observed.started_at)
