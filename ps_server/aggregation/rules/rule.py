"""The interface of a PS rule: one check of a delta, before any strategy sees it, that passes, scales or refuses.

`DeltaGuard` runs every rule on each push, in the order `rules.ordered_rules` gives, after its admission
checks (one delta per site and base version or round). A rule enters `RULES` under its `name` by being
defined (a subclass of `Rule` that sets `name`), so a rule from outside geofed is a module that
`GEOFED_PLUGINS` names (`geofed.plugins`): the PS imports it before it builds its guard. Plain Python over
numpy, no gRPC.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from geofed.config import FederationConfig

from ...errors import DeltaRefused
from ...global_model import Snapshot
from ..consensus import ConsensusBound
from ..displacement import DisplacementBudget
from ..norm_bound import NormBound

RULES: dict[str, type[Rule]] = {}
"""Every declared rule by name; a subclass of `Rule` that sets `name` enters it."""


class Guard(Protocol):
    """What a rule reads of the guard that runs it: the federation and the sites' shared history."""

    fed: FederationConfig
    norms: NormBound  # each site's recent accepted norms
    budget: DisplacementBudget  # each site's recent accepted deltas, as count sketches
    consensus: ConsensusBound
    round_deltas: int  # the most deltas a site lands in one round

    def limits(self, snapshot: Snapshot, numel: int) -> tuple[float, float]: ...

    def bound_norm(self, norm: float, local_steps: int) -> float: ...

    def scale(self, client_id: str, norm: float, local_steps: int, snapshot: Snapshot, numel: int) -> float: ...

    def in_round(self, site: str) -> int: ...


@dataclass
class Delta:
    """A push on its way through the rules: what they have scaled it to so far."""

    push: Any  # the received push: client_id, header (local_steps), norm, numel and its count sketch, if any
    site: str  # the unit of trust it counts for
    snapshot: Snapshot  # the version it would fold into
    mode: str  # the live aggregation mode, sync or async
    sketch: np.ndarray | None = None  # its count sketch as the round would apply it; None where none is kept
    scale: float = 1.0  # the product of the rules' factors so far
    rule: str = ""  # the last rule that scaled it down
    length_scale: float = 1.0  # the product of the factors of the rules that bound one delta's length

    @property
    def local_steps(self) -> int:
        return self.push.header.local_steps

    def scaled(self, factor: float, rule: Rule) -> None:
        """Take a rule's factor (< 1) on the delta and on its sketch."""
        self.scale, self.rule = self.scale * factor, rule.name
        if rule.bounds_length:
            self.length_scale *= factor
        if self.sketch is not None:
            self.sketch = self.sketch * factor


@dataclass(frozen=True)
class Verdict:
    """What a rule decided on a delta: a factor (1: as it is), or a refusal with its reason and message."""

    scale: float = 1.0
    reason: str = ""  # the label the rejection metric counts a refusal by; empty: not refused
    message: str = ""  # what the client reads

    @property
    def refused(self) -> bool:
        return bool(self.reason)


PASS = Verdict()


class Rule(ABC):
    """One defence the PS applies to every delta; instances live as long as their guard.

    A rule reads the sites' history from the guard and records nothing itself: what an accepted delta adds
    to the history the guard records, after every rule passed it.
    """

    name: ClassVar[str]  # the label of the bounded-deltas metric when it scales a delta down
    # Where a rule from outside geofed runs: after the rule of this name; empty, after every built-in rule.
    after: ClassVar[str] = ""
    # A bound on one delta's length: its factor enters the norm the site's history records (the other sites'
    # bounds scale from it); a bound over several deltas leaves that norm alone.
    bounds_length: ClassVar[bool] = False
    refusal: ClassVar[type[DeltaRefused]] = DeltaRefused  # what the guard raises when it refuses

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            if cls.name in RULES:
                raise ValueError(f"PS rule {cls.name!r} is declared twice")
            RULES[cls.name] = cls

    @abstractmethod
    def check(self, delta: Delta, guard: Guard) -> Verdict:
        """PASS, a factor below 1 that brings `delta` within the rule, or a refusal."""
