"""An observer of the Aggregator that keeps every event it is told, for tests that check what happened."""

from __future__ import annotations

from typing import TypeVar

from ps_server.aggregation.events import Event

E = TypeVar("E")


class EventLog:
    """Every event the Aggregator published to it, in order (`ps_server.aggregation.events.Observer`)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def notify(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[E]) -> list[E]:
        """The events of one kind, in order."""
        return [e for e in self.events if isinstance(e, kind)]
