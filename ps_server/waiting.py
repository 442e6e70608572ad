"""Whom a synchronous round waits for: the sessions the PS sees training.

A sync round closes once a quorum of the sites it waits for has pushed, or at the straggler timeout. A site
is waited for while one of its live clients has a delta in the round, or shows progress: its heartbeat
reports steps trained since the round's base (client_agent.progress), the bytes of a delta arrive, a delta
is accepted, or the PS first saw it just now. Joining again and receiving models are not progress: an
evaluator that joins for every version it reads holds no round. A client that shows none for longer than
its silence bound is not waited for; it may still push, and its delta is then taken by the late and
staleness rules like any other.

The silence bound is the client's own measured round time (download, training, upload) times the straggler
margin, and never less than a few heartbeat intervals, since progress is only seen heartbeat by heartbeat;
a client with no timed round yet gets the few heartbeat intervals alone. A session that has never shown
progress holds at most the round it joined in: its bound is also at most one straggler timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

# Heartbeats without progress after which a client with no timed round is not waited for.
SILENT_HEARTBEATS = 3


def heartbeat_interval_s(session_ttl_s: float) -> float:
    """How often a client heartbeats while it trains (client_agent.connection.ps_client): a third of its session's life,
    at least every second and at most every 15 s."""
    return min(max(1.0, session_ttl_s / 3), 15.0)


def silence_bound_s(round_time_s: float | None, heartbeat_s: float, margin: float) -> float:
    """How long a client may show no progress and still be waited for."""
    few = SILENT_HEARTBEATS * heartbeat_s
    return few if not round_time_s else max(few, margin * round_time_s)


@dataclass(frozen=True)
class Activity:
    """What the PS saw of one client, in Unix seconds (0: never)."""

    client_id: str
    first_seen: float
    progress_at: float  # its reported progress last moved
    delta_at: float  # its last delta was accepted
    upload_at: float  # bytes of a push of its in flight last arrived (0: none in flight)

    @property
    def has_trained(self) -> bool:
        return self.progress_at > 0 or self.delta_at > 0


@dataclass(frozen=True)
class NotWaiting:
    """A client the round does not wait for, and why."""

    client_id: str
    reason: str  # no_progress_since_join | no_progress_in_round
    silent_s: float
    bound_s: float
    bound_from: str  # round_time | heartbeats | straggler_timeout


def not_waiting(a: Activity, *, now: float, round_start: float, round_time_s: float | None, heartbeat_s: float,
                margin: float, straggler_timeout_s: float) -> NotWaiting | None:
    """None when the round waits for the client `a`, else why not.

    `round_start`: when the current version was published. A client whose delta arrived since is in the round.
    One that has trained before cannot show progress on this round before its model exists, so its silence
    counts from then; one that never showed any counts from when the PS first saw it, so sessions that only
    heartbeat hold no round beyond their first bound.
    """
    if a.delta_at > 0 and a.delta_at >= round_start:
        return None
    last = max(a.first_seen, a.progress_at, a.delta_at, a.upload_at)
    if a.has_trained:
        last = max(last, round_start)
    bound = silence_bound_s(round_time_s, heartbeat_s, margin)
    source = "heartbeats" if bound == SILENT_HEARTBEATS * heartbeat_s else "round_time"
    if not a.has_trained and straggler_timeout_s < bound:
        bound, source = straggler_timeout_s, "straggler_timeout"
    silent = now - last
    if silent <= bound:
        return None
    reason = "no_progress_in_round" if a.has_trained else "no_progress_since_join"
    return NotWaiting(a.client_id, reason, silent, bound, source)
