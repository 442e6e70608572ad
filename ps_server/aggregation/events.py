"""What the Aggregator tells its observers happened, as event objects: one frozen dataclass each.

The Aggregator publishes every event to each of its observers (`Observer.notify`) in the order they were
given; an observer picks the events it counts and ignores the rest. Events published under the Aggregator's
lock say so: an observer of those must not call back into it from another thread and wait. Plain Python, no
gRPC: the PS's metrics, its checkpoints and status page, and the contribution accounting are observers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..global_model import Snapshot


@dataclass(frozen=True)
class DeltaBounded:
    """A rule scaled a delta down before it was folded (under the lock)."""

    client_id: str
    site: str
    rule: str  # the last rule that scaled it down ("norm_bound", "consensus", "displacement_budget", ...)
    norm: float  # its length as received
    bounded_to: float  # its length as folded


@dataclass(frozen=True)
class DeltaFolded:
    """A delta went into the open round, ACCEPTED (under the lock)."""

    client_id: str
    staleness: int
    tokens: int  # server-vouched
    weight: float  # what the strategy credited it
    norm: float  # its length as folded
    clip_norm: float  # the federation's clip of that length (0: none)
    tokens_per_s: float  # the throughput its client reported (0: none)
    reported_tokens: int = 0  # the tokens its client says it trained (goodput's count)


@dataclass(frozen=True)
class RoundClosed:
    """The open round became a version; its deltas are in the model (under the lock)."""

    version: int
    deltas: int
    clients: int
    weight: float


@dataclass(frozen=True)
class RoundDropped:
    """The Aggregator refused the open round (a non-finite sum, say): nothing of it is in the model, the
    previous version is kept (under the lock)."""

    reason: str  # the label the rejection metric counts it by
    why: str
    deltas: int


@dataclass(frozen=True)
class RoundDiscarded:
    """The open round's deltas no longer fit the model (another PS's model of another layout was adopted):
    nothing of them is in it; nothing was refused (under the lock)."""


@dataclass(frozen=True)
class VersionComplete:
    """A new version's state is complete, its upload ids remembered (under the lock): the only moment a
    checkpoint can see that version's exact state, since under a quick succession of versions the next one
    may be published before `VersionApplied` goes out."""

    snapshot: Snapshot


@dataclass(frozen=True)
class VersionApplied:
    """A new version is the global model (the initial one, one a round made, one adopted); published once the
    lock is let go, oldest first."""

    snapshot: Snapshot


Event = DeltaBounded | DeltaFolded | RoundClosed | RoundDropped | RoundDiscarded | VersionComplete | VersionApplied


class Observer(Protocol):
    """Something the Aggregator tells what happened."""

    def notify(self, event: Event) -> None: ...
