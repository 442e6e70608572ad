"""What the Aggregator asks about the clients taking part: how many sites a round waits for, a client id's
site (the unit of trust every quota, bound and robust window counts), and whether a site is still there.
The PS core answers from its sessions; `FixedSites` is a fixed answer, for an Aggregator without a PS."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Sites(Protocol):
    """The clients taking part, as the Aggregator sees them."""

    def active_client_count(self) -> int:
        """Sites a sync round's quorum waits for."""
        ...

    def unit_of(self, client_id: str) -> str:
        """`client_id`'s site: the unit of trust."""
        ...

    def site_present(self, site: str) -> bool:
        """Whether `site` has a client taking part now."""
        ...


@dataclass(frozen=True)
class FixedSites:
    """`active` sites take part, all present; a client id is its own site or, with `dotted`, the part of it
    before the first dot (`<site>.<name>`, as a site credential mints them)."""

    active: int = 1
    dotted: bool = False

    def active_client_count(self) -> int:
        return self.active

    def unit_of(self, client_id: str) -> str:
        return client_id.split(".", 1)[0] if self.dotted else client_id

    def site_present(self, site: str) -> bool:
        return True
