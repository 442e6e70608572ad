"""The server half of a paradigm: how exchanged vectors are folded, combined and published.

The `Aggregator` owns what every paradigm shares (admission and staleness, idempotent upload ids, when a
round closes, publishing versions, durability) and calls a `Strategy` for what a paradigm changes
(Algorithm 1, step 13): the payload it expects, the accumulator, `close()` → a round sum,
`apply(round sum)` → the next global vector, and `downlink(snapshot)` → what clients receive. Between
close and apply sits a `Reducer` (`reducer.py`): the identity for one PS, the place where a ring
all-reduce between PS groups plugs in. Plain numpy: no gRPC, no protobuf, no torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from geofed.config import FederationConfig

from ..global_model import Manifest, Snapshot
from .downlink import Downlink, build_stream, full_downlink
from .rounds import Admission


class Payload(Protocol):
    """A validated push as a strategy sees it (ps_server.ingest.ReceivedPush)."""

    client_id: str
    norm: float
    numel: int

    def iter_values(self, max_numel: int): ...


@dataclass
class RoundSum:
    """A closed round: the combined update (owned by whoever holds this) and who contributed."""

    delta: np.ndarray
    count: int
    clients: frozenset[str]
    weight: float


class Accumulator(Protocol):
    """What a strategy folds a round's payloads into; memory O(model), never O(clients × model)."""

    count: int
    clients: set[str]
    weight: float

    def close(self) -> None: ...


class Strategy(ABC):
    """One paradigm's aggregation, for one form of deltas: its paradigm's settings name it
    (`ParadigmSettings.strategies`, by the delta form it folds)."""

    def __init__(self, fed: FederationConfig) -> None:
        self.fed = fed
        self.cfg = fed.aggregation
        down = fed.downlink
        self.stream = build_stream(down.encoding, down.grid_steps, down.history)

    @property
    def name(self) -> str:
        """The paradigm's name (`paradigm.name`), which checkpoints record."""
        return self.fed.paradigm.name

    @abstractmethod
    def install(self, numel: int, manifest: Manifest) -> None:
        """Size the strategy's state for a freshly installed (or restored) global vector."""

    @abstractmethod
    def payload_numel(self, snapshot: Snapshot) -> int:
        """Elements a client's payload must decode to, given the current global vector."""

    def round_numel(self, snapshot: Snapshot) -> int:
        """Elements of a closed round's combined update (what `close` returns and `apply` takes)."""
        return self.payload_numel(snapshot)

    @abstractmethod
    def open_round(self, snapshot: Snapshot) -> Accumulator:
        """A fresh accumulator for the round that starts with the next accepted payload."""

    @abstractmethod
    def fold(self, acc: Accumulator, push: Payload, admission: Admission, *, num_tokens: int,
             local_steps: int) -> float:
        """Fold one validated payload in; return the weight it was credited with."""

    @abstractmethod
    def close(self, acc: Accumulator) -> RoundSum:
        """Turn the accumulator into the round's combined update (consumes it)."""

    @abstractmethod
    def apply(self, snapshot: Snapshot, round_sum: RoundSum) -> np.ndarray:
        """The next global vector from the current one and the (reduced) round sum."""

    def downlink(self, snapshot: Snapshot, have_version: int = 0) -> Downlink:
        """What a client holding `have_version` receives for `snapshot`: by default the federation's model
        stream (an exact compressed difference, or the whole vector); a paradigm may send its own encoding."""
        if self.stream is None:
            return full_downlink(snapshot)
        return self.stream.downlink(snapshot, have_version)

    def check_manifest(self, manifest: Manifest) -> None:  # noqa: B027 - optional hook
        """Refuse (ValueError) a master's Θ0 layout that this paradigm cannot aggregate."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:  # noqa: B027 - stateless default
        """Restore what `state_dict` saved."""
