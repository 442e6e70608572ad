"""The PS's aggregation state machine (Algorithm 1, PS side): admit, accumulate, close rounds, step.

Plain Python over numpy: no gRPC here. The servicer hands it validated pushes; a timer thread calls
`tick()` so straggler and buffer timeouts fire without traffic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from geofed.config import FederationConfig

from .accumulator import DeltaAccumulator
from .outer import OuterOptimizer, build_outer_optimizer
from .robust import RobustAccumulator
from .rounds import StaleDelta, admit, should_close
from .weighting import base_weight, clip_scale, delta_scale
from ..global_model import GlobalModel, Snapshot, TensorEntry
from ..ingest import PushHeader, PushRejected, ReceivedPush

log = logging.getLogger("geofed.ps")

_UPLOADS_PER_CLIENT = 4  # upload ids remembered per client for idempotent retries


@dataclass(frozen=True)
class PushOutcome:
    """What a push led to; mirrors PushResult on the wire."""

    status: str  # ACCEPTED | APPLIED | DUPLICATE
    version: int
    staleness: int = 0
    weight: float = 0.0
    message: str = ""


@dataclass
class ClientLedger:
    """Per-client accounting the PS exposes (contribution = summed weight of its applied deltas)."""

    pushes: int = 0
    contribution: float = 0.0
    last_staleness: int = 0


class Aggregator:
    """Owns the accumulator and outer optimizer and publishes new global versions."""

    def __init__(
        self,
        fed: FederationConfig,
        model: GlobalModel,
        *,
        active_clients: Callable[[], int] = lambda: 1,
        on_apply: Callable[[Snapshot], None] | None = None,
        on_staleness: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fed = fed
        self.cfg = fed.aggregation
        self.model = model
        self.active_clients = active_clients
        self.on_apply = on_apply
        self.on_staleness = on_staleness
        self.clock = clock
        self.lock = threading.RLock()
        self.outer: OuterOptimizer | None = None
        self.acc: DeltaAccumulator | RobustAccumulator | None = None
        self.first_at: float | None = None
        self.uploads: dict[str, OrderedDict[str, PushOutcome]] = {}  # client -> its recent upload ids
        self.ledger: dict[str, ClientLedger] = {}
        self._pending: dict[str, float] = {}  # client -> weight buffered, credited when applied

    @property
    def numel(self) -> int | None:
        snap = self.model.current()
        return snap.flat.size if snap else None

    @property
    def buffered(self) -> int:
        return self.acc.count if self.acc else 0

    # ---- admission --------------------------------------------------------------------------------

    def precheck(self, client_id: str, header: PushHeader, *, master: bool) -> PushOutcome | None:
        """Refuse early (before the payload crosses the WAN); return the old outcome of a retried upload."""
        with self.lock:
            done = self._recall(client_id, header.upload_id)
            if done is not None:
                return PushOutcome("DUPLICATE", self.model.version, done.staleness, done.weight, "already received")
            if header.init:
                if not master:
                    raise PushRejected(
                        "PERMISSION_DENIED", "not_master", "only the master client may send the initial model"
                    )
                if self.model.current() is not None:
                    raise PushRejected("FAILED_PRECONDITION", "initialised", "the global model is already initialised")
                return None
            self._admit(header.base_version)
        return None

    def _admit(self, base_version: int):
        try:
            return admit(self.cfg, base_version, self.model.version)
        except StaleDelta as exc:
            raise PushRejected("FAILED_PRECONDITION", "stale", str(exc)) from exc
        except ValueError as exc:
            raise PushRejected("INVALID_ARGUMENT", "version", str(exc)) from exc

    def _recall(self, client_id: str, upload_id: str) -> PushOutcome | None:
        return self.uploads.get(client_id, {}).get(upload_id)

    def _remember(self, client_id: str, upload_id: str, outcome: PushOutcome) -> None:
        """Remember a client's last few upload ids for idempotent retries.

        A client retransmits only its most recent upload (plus at most one accepted-but-unapplied one it
        resends after a PS restart), so a handful per client is enough. Keeping the table O(clients)
        rather than O(pushes ever) keeps the checkpoints that carry it from growing with history.
        """
        recent = self.uploads.setdefault(client_id, OrderedDict())
        recent[upload_id] = outcome
        while len(recent) > _UPLOADS_PER_CLIENT:
            recent.popitem(last=False)

    # ---- folding in -------------------------------------------------------------------------------

    def initialise(self, push: ReceivedPush) -> PushOutcome:
        """Adopt the master's Θ0 (Fig. 1 step 2) or a re-seed after total loss (§III-B4)."""
        header = push.header
        with self.lock:
            if self.model.current() is not None:
                raise PushRejected("FAILED_PRECONDITION", "initialised", "the global model is already initialised")
            flat = np.empty(push.numel, dtype=np.float32)
            for off, values in push.iter_values(push.numel):
                flat[off : off + values.size] = values
            version = max(1, header.base_version)
            self.outer = build_outer_optimizer(self.cfg, push.numel)
            self.acc = None
            snap = self.model.publish(version, flat, header.manifest)
            outcome = PushOutcome("APPLIED", version, message="initial model installed")
            self._remember(push.client_id, header.upload_id, outcome)
            log.info("event=init client=%s version=%d numel=%d", push.client_id, version, push.numel)
        if self.on_apply:
            self.on_apply(snap)
        return outcome

    def submit(self, push: ReceivedPush) -> PushOutcome:
        """Fold one validated delta into the running sum; may close the round."""
        header = push.header
        snap = None
        with self.lock:
            done = self._recall(push.client_id, header.upload_id)
            if done is not None:
                return PushOutcome("DUPLICATE", self.model.version, done.staleness, done.weight, "already received")
            current = self.model.current()
            if current is None:
                raise PushRejected("FAILED_PRECONDITION", "no_model", "the PS has no model yet")
            adm = self._admit(header.base_version)
            base = base_weight(self.cfg, header.num_tokens)
            weight = base * adm.factor
            clip = clip_scale(push.norm, self.cfg.clip_norm)
            robust = self.cfg.robust != "none"
            # Order statistics ignore weights: a poisoned client must not buy influence with a token count.
            scale = clip if robust else delta_scale(self.cfg, weight, header.local_steps) * clip
            if self.acc is None:
                self.acc = (
                    RobustAccumulator(current.flat.size, self.cfg.robust, self.cfg.trim_fraction)
                    if robust else DeltaAccumulator(current.flat.size)
                )
            for off, values in push.iter_values(current.flat.size):
                self.acc.add(off, values, scale)
            # Normalise by the *base* weight: the staleness factor must shrink a stale delta, not cancel out
            # (with K = 1, dividing by w·f would apply every delta at full strength however stale it is).
            self.acc.commit(push.client_id, base, header.local_steps)
            if self.first_at is None:
                self.first_at = self.clock()
            ledger = self.ledger.setdefault(push.client_id, ClientLedger())
            ledger.pushes += 1
            ledger.last_staleness = adm.staleness
            self._pending[push.client_id] = self._pending.get(push.client_id, 0.0) + weight
            if self.on_staleness:
                self.on_staleness(adm.staleness)
            outcome = PushOutcome("ACCEPTED", self.model.version, adm.staleness, weight)
            if self._should_close():
                snap = self._apply()
                outcome = PushOutcome("APPLIED", snap.version, adm.staleness, weight)
            self._remember(push.client_id, header.upload_id, outcome)
        if snap is not None and self.on_apply:
            self.on_apply(snap)
        return outcome

    def _should_close(self) -> bool:
        acc = self.acc
        if acc is None:
            return False
        return should_close(
            self.cfg, buffered=acc.count, clients_in_round=len(acc.clients), active_clients=self.active_clients(),
            first_at=self.first_at, now=self.clock(),
        )

    def tick(self) -> Snapshot | None:
        """Close a round whose straggler/buffer timeout has passed (called by a timer thread)."""
        with self.lock:
            snap = self._apply() if self._should_close() else None
        if snap is not None and self.on_apply:
            self.on_apply(snap)
        return snap

    def _apply(self) -> Snapshot:
        """ϕ ← ϕ + outer(mean δ): the outer step, built in the accumulator's own buffer."""
        acc, current = self.acc, self.model.current()
        assert acc is not None and current is not None and self.outer is not None
        update = acc.mean_(self.cfg.fednova)
        self.outer.increment_(update)
        update += current.flat  # θ_new = θ + u, in place: no extra model-sized buffer
        new_version = current.version + 1
        for client_id, weight in self._pending.items():
            self.ledger.setdefault(client_id, ClientLedger()).contribution += weight
        log.info(
            "event=apply version=%d deltas=%d clients=%d weight=%.1f", new_version, acc.count, len(acc.clients),
            acc.weight,
        )
        self.acc, self.first_at, self._pending = None, None, {}
        return self.model.publish(new_version, update, current.manifest)

    # ---- durability -------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Outer optimizer, upload ids and ledger; buffered (unapplied) deltas are not persisted."""
        with self.lock:
            return {
                "outer": self.outer.state_dict() if self.outer else {},
                "uploads": [
                    [c, u, o.status, o.version, o.staleness, o.weight]
                    for c, recent in self.uploads.items() for u, o in recent.items()
                ],
                "ledger": {k: asdict(v) for k, v in self.ledger.items()},
            }

    def restore(self, snapshot_version: int, flat: np.ndarray, manifest: tuple[TensorEntry, ...], state: dict) -> None:
        """Resume from a checkpoint: publish its model and reload optimizer state and upload ids."""
        with self.lock:
            self.outer = build_outer_optimizer(self.cfg, flat.size)
            if state.get("outer"):
                self.outer.load_state_dict(state["outer"])
            self.uploads = {}
            for client_id, upload_id, status, version, staleness, weight in state.get("uploads", []):
                outcome = PushOutcome(status, version, staleness, weight)
                self.uploads.setdefault(client_id, OrderedDict())[upload_id] = outcome
            self.ledger = {k: ClientLedger(**v) for k, v in state.get("ledger", {}).items()}
            self.acc, self.first_at, self._pending = None, None, {}
            self.model.publish(snapshot_version, flat, manifest)
