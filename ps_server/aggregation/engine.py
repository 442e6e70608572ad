"""Where a round's vector lives: the `RoundEngine` the one `Aggregator` runs its rounds on.

The `Aggregator` owns what every PS shares: admission and staleness, idempotent upload ids, the site
defences (`DeltaGuard`: site quota, vouched weights, norm bound, displacement budget), when a round closes,
the ledger and contributions. An engine owns the exchanged vector and the strategy's work on it:

- `LocalEngine`: in this process; the strategy's accumulator, the `Reducer` between close and apply (a
  ring all-reduce across PS groups plugs in there), the model published by this PS.
- `ps_server.shards.engine.ShardedEngine`: sliced over PS shard processes; folds, the outer step and the
  two-phase publish go over the shard links.

Every call is made with the Aggregator's lock held. Plain Python over numpy: no gRPC here.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from ..checkpoint import CheckpointStore, PSCheckpoint
from ..global_model import GlobalModel, Manifest, Snapshot
from ..ingest import PushHeader, PushReceiver, ReceivedPush
from .downlink import Downlink
from .guard import all_finite
from .norm_bound import BoundedPayload
from .reducer import LocalReducer, ReduceFailed, Reducer, empty_round
from .rounds import Admission
from .strategy import Accumulator, Strategy

log = logging.getLogger("geofed.ps")

_EMPTY = np.empty(0, dtype=np.float32)


@dataclass(frozen=True)
class RoundClosed:
    """A closed round: the version it makes, or why it was dropped (`dropped`: (reason, why))."""

    version: int
    count: int
    clients: int
    weight: float
    flat: np.ndarray | None = None  # the next vector, when the engine holds it in this process
    dropped: tuple[str, str] | None = None


@dataclass(frozen=True)
class Resumed:
    """What a restart found: the version it resumed (0: the registry alone) and a checkpoint's registry."""

    version: int
    registry: dict | None = None


class Rounds(Protocol):
    """What an engine uses of the `Aggregator` that runs its rounds (bound with `RoundEngine.bind`)."""

    model: GlobalModel
    strategy: Strategy
    cfg: Any  # the live AggregationConfig
    privacy: Any  # the site-level DP mechanism (ps_server.privacy.SitePrivacy): noises a closed round

    def state_dict(self) -> dict: ...

    def load_bookkeeping(self, state: dict) -> None: ...

    def restore(self, snapshot_version: int, flat: np.ndarray, manifest: Manifest, state: dict) -> None: ...


class RoundEngine(ABC):
    """The part of a round that depends on where the vector lives (see the module docstring)."""

    model: GlobalModel

    def bind(self, agg: Rounds) -> None:
        """Called once by the Aggregator that runs its rounds here."""
        self.agg = agg

    @abstractmethod
    def payload_numel(self) -> int | None:
        """Elements the next delta must decode to (None before Θ0 is installed)."""

    @abstractmethod
    def receiver(self, client_id: str, *, max_upload_bytes: int, max_init_numel: int):
        """What receives one push's header, payload and trailer (`ingest.PushReceiver`'s interface)."""

    def check_header(self, header: PushHeader) -> None:  # noqa: B027 - nothing to check by default
        """Refuse (StaleDelta) a push cut for another layout of the vector, before its payload is sent."""

    def discard(self, push) -> None:  # noqa: B027 - nothing held by default
        """A received push that will not be folded (duplicate, stale, refused): release what holds it."""

    def settle(self) -> Snapshot | None:
        """Publish a version a closed round committed but could not publish yet; None: none waiting."""
        return None

    def theta_norm(self, snapshot: Snapshot) -> float:
        """‖θ‖ of the exchanged vector of `snapshot` (the norm bound's weight-decay term)."""
        return float(np.linalg.norm(snapshot.flat.astype(np.float64)))

    @abstractmethod
    def install(self, push, version: int) -> Snapshot:
        """Adopt the master's Θ0 (`push`) as `version` and publish it."""

    @abstractmethod
    def open_round(self, snapshot: Snapshot) -> Accumulator:
        """The account of the round the next accepted delta opens (count, clients, weight)."""

    @abstractmethod
    def fold(
        self, acc: Accumulator, bounded: BoundedPayload, admission: Admission, *, num_tokens: int, local_steps: int
    ) -> float:
        """Fold one bounded delta into the open round; the weight it was credited with."""

    @abstractmethod
    def close(self, acc: Accumulator | None, current: Snapshot) -> RoundClosed:
        """Close the open round on `current`: the next version, or why it is dropped (raises `Unavailable`
        when it cannot be closed now: the round stays open)."""

    @abstractmethod
    def publish(self, closed: RoundClosed, manifest: Manifest) -> Snapshot | None:
        """Publish a closed round's version (after the Aggregator's bookkeeping); None: deferred (`settle`)."""

    def reset_round(self) -> None:  # noqa: B027 - the accumulator is all there is by default
        """The open round was dropped: forget whatever the engine kept of it."""

    def durable(self) -> None:  # noqa: B027 - the checkpoint is the record by default
        """The Aggregator's state changed in a way a restart must find (an installed model)."""

    @abstractmethod
    def state_dict(self) -> dict:
        """The engine's part of the Aggregator's durable state."""

    @abstractmethod
    def resume(self, store: CheckpointStore) -> Resumed | None:
        """Load the newest durable state (None: nothing to resume)."""

    @abstractmethod
    def save(self, store: CheckpointStore, registry: dict) -> str:
        """Write the current version and the Aggregator's state durably; where (OSError if the disk refuses)."""

    def status(self) -> dict:
        """Fields of the PS status the engine knows better than the model snapshot."""
        return {}

    def downlink(self, snapshot: Snapshot, have_version: int = 0) -> Downlink:
        raise NotImplementedError(f"{type(self).__name__} streams the model through its own servicer")

    def restore(self, flat: np.ndarray, manifest: Manifest, state: dict) -> None:
        """A checkpoint's engine state, for an engine that holds the vector in this process."""
        raise NotImplementedError(f"{type(self).__name__} resumes from its own durable state (`resume`)")


class LocalEngine(RoundEngine):
    """The vector in this process: the strategy's accumulator, `reducer` between close and apply."""

    def __init__(self, reducer: Reducer | None = None) -> None:
        self.reducer = reducer or LocalReducer()

    def bind(self, agg: Rounds) -> None:
        super().bind(agg)
        self.model, self.strategy = agg.model, agg.strategy

    def payload_numel(self) -> int | None:
        snap = self.model.current()
        return self.strategy.payload_numel(snap) if snap else None

    def receiver(self, client_id: str, *, max_upload_bytes: int, max_init_numel: int) -> PushReceiver:
        return PushReceiver(
            client_id=client_id,
            expected_numel=self.payload_numel(),
            max_upload_bytes=max_upload_bytes,
            max_init_numel=max_init_numel,
        )

    def install(self, push: ReceivedPush, version: int) -> Snapshot:
        flat = np.empty(push.numel, dtype=np.float32)
        for off, values in push.iter_values(push.numel):
            flat[off : off + values.size] = values
        self.strategy.install(push.numel, push.header.manifest)
        return self.model.publish(version, flat, push.header.manifest)

    def open_round(self, snapshot: Snapshot) -> Accumulator:
        return self.strategy.open_round(snapshot)

    def fold(self, acc, bounded, admission, *, num_tokens: int, local_steps: int) -> float:
        return self.strategy.fold(acc, bounded, admission, num_tokens=num_tokens, local_steps=local_steps)

    def close(self, acc, current: Snapshot) -> RoundClosed:
        """close → reduce → apply (Algorithm 1, step 13). The guard's bounds make a non-finite round impossible in
        practice; the checks here make it impossible, full stop: nothing non-finite is ever published."""
        closed = self.strategy.close(acc) if acc is not None else empty_round(self.strategy.round_numel(current))
        version = current.version + 1
        try:
            round_sum = self.reducer.reduce(closed, current.version)
        except ReduceFailed as exc:  # the PSs could not combine it; none of them applies it
            return RoundClosed(
                version, closed.count, len(closed.clients), closed.weight, dropped=(exc.reason, exc.message)
            )
        self.agg.privacy.noise_(round_sum)  # site-level DP: the round's noise, before the outer step
        dropped = RoundClosed(
            version,
            round_sum.count,
            len(round_sum.clients),
            round_sum.weight,
            dropped=("nonfinite_round", "the combined update is non-finite"),
        )
        if not all_finite(round_sum.delta):  # before the outer optimizer sees it: its state stays clean
            return dropped
        flat = self.strategy.apply(current, round_sum)
        if not all_finite(flat):
            return replace(dropped, dropped=("nonfinite_round", "the next model is non-finite"))
        return RoundClosed(version, round_sum.count, len(round_sum.clients), round_sum.weight, flat=flat)

    def publish(self, closed: RoundClosed, manifest: Manifest) -> Snapshot:
        return self.model.publish(closed.version, closed.flat, manifest)

    def downlink(self, snapshot: Snapshot, have_version: int = 0) -> Downlink:
        return self.strategy.downlink(snapshot, have_version)

    # ---- durability -------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "paradigm": self.strategy.name,
            "strategy": self.strategy.state_dict(),
            "downlink": self.strategy.stream.state_dict(self.model.current()) if self.strategy.stream else {},
            "mode": self.agg.cfg.mode,  # the live mode: an 'auto' federation resumes in it
        }

    def restore(self, flat: np.ndarray, manifest: Manifest, state: dict) -> None:
        """A checkpoint's strategy and model-stream state (the Aggregator publishes its model)."""
        saved = state.get("paradigm", "pretrain")
        if saved != self.strategy.name:
            raise ValueError(
                f"the checkpoint was written by a federation running paradigm {saved!r}, this PS runs "
                f"{self.strategy.name!r}; start it with the checkpoint's paradigm or an empty checkpoint dir"
            )
        self.strategy.install(flat.size, manifest)
        strategy_state = state.get("strategy", {"outer": state["outer"]} if state.get("outer") else {})
        if strategy_state:
            self.strategy.load_state_dict(strategy_state)
        if self.strategy.stream is not None:
            self.strategy.stream.load_state_dict(state.get("downlink", {}))

    def resume(self, store: CheckpointStore) -> Resumed | None:
        ckpt = store.load_latest()
        if ckpt is None:
            return None
        if ckpt.version:
            self.agg.restore(ckpt.version, ckpt.flat, ckpt.manifest, ckpt.aggregator)
        return Resumed(ckpt.version, ckpt.registry)

    def save(self, store: CheckpointStore, registry: dict) -> str:
        # Before the master's init there is no model, but enrolled sites and minted tokens must still
        # survive a restart: version 0 holds the registry alone.
        snap = self.model.current()
        version, flat, manifest = (snap.version, snap.flat, snap.manifest) if snap else (0, _EMPTY, ())
        return str(store.save(PSCheckpoint(version, flat, manifest, self.agg.state_dict(), registry)))
