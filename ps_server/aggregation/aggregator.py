"""The PS's aggregation state machine (Algorithm 1, PS side): admit, accumulate, close rounds, publish.

What every PS shares lives here: admission and staleness, idempotent upload ids, the site defences
(`DeltaGuard`: one delta per site per base and round, vouched weights, the norm bound and the displacement
budget), when a round closes, the ledger, contributions and round times. What a paradigm changes (the
payload, the accumulator, close → round sum, apply → next vector, the downlink) is its `Strategy`; where
the vector lives and the strategy runs (this process, or PS shards) is the `RoundEngine` chosen at
construction (`engine.py`). What happened (a delta bounded or folded, a round closed or dropped, a version
published) goes out as events (`events.py`) to its observers: the contributions, the PS's metrics,
checkpoints and status page. Plain Python over numpy: no gRPC here. The core hands it validated pushes; a
timer thread calls `tick()` so straggler and buffer timeouts fire without traffic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from geofed.config import FederationConfig

from ..checkpoint import CheckpointStore
from ..errors import AlreadySent, DeltaRefused, InvalidPush, NotPermitted, NotReady, StaleDelta, Unavailable
from ..global_model import GlobalModel, Manifest, Snapshot
from ..ingest import PushHeader
from ..privacy import SitePrivacy
from .contributions import Contributions
from .downlink import Downlink
from .engine import LocalEngine, Resumed, RoundEngine
from .events import (
    DeltaBounded,
    DeltaFolded,
    Event,
    Observer,
    RoundClosed,
    RoundDiscarded,
    RoundDropped,
    VersionApplied,
    VersionComplete,
)
from .guard import DeltaGuard
from .reducer import Reducer
from .round_times import GONE_AFTER_S, RoundTimes
from .rounds import admit, should_close
from .sites import FixedSites, Sites
from .strategies import build_strategy
from .strategy import Accumulator, Strategy

log = logging.getLogger("geofed.ps")

_UPLOADS_PER_CLIENT = 4  # upload ids remembered per client for idempotent retries


@dataclass(frozen=True)
class PushOutcome:
    """What a push led to; mirrors PushResult on the wire."""

    status: str  # ACCEPTED | APPLIED | DUPLICATE | STALE
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
    """Runs rounds of the federation's strategy on its engine and publishes new global versions."""

    def __init__(
        self,
        fed: FederationConfig,
        model: GlobalModel,
        *,
        sites: Sites = FixedSites(),
        observers: Sequence[Observer] = (),
        clock: Callable[[], float] = time.monotonic,
        strategy: Strategy | None = None,
        reducer: Reducer | None = None,
        contributions: Contributions | None = None,
        client_timeout_s: float = GONE_AFTER_S,
        engine: RoundEngine | None = None,
    ) -> None:
        self.fed = fed
        self.cfg = fed.aggregation
        self.model = model
        self.strategy = strategy or build_strategy(fed)
        self.contributions = contributions or Contributions()  # who put what into the model
        # The clients taking part: how many a round waits for, each one's site (the unit of trust every quota,
        # bound and robust window counts), whether a site is still there.
        self.sites = sites
        # Told what happened (`events`), in this order: the contributions first, then the PS's own.
        self.observers: list[Observer] = [self.contributions, *observers]
        if engine is not None and reducer is not None:
            raise ValueError("a reducer combines the rounds of an in-process engine; pass it to LocalEngine")
        self.engine = engine or LocalEngine(reducer)
        if getattr(self.engine, "model", model) is not model:
            raise ValueError("the engine publishes its own model: construct the Aggregator with engine.model")
        self.privacy = SitePrivacy(fed)  # site-level DP: the clip to C, the round's noise, ε (ps_server.privacy)
        self.engine.bind(self)
        # vouched weights, one delta per site and base/round, the norm bound and the displacement budget
        self.guard = DeltaGuard(fed, sites.unit_of, theta_norm=self.engine.theta_norm, clock=clock,
                                active_for_s=client_timeout_s, present=sites.site_present)
        self.clock = clock
        # Client round times: the tuned straggler timeout and mode advice; a client with no delta for
        # client_timeout_s (the quorum's notion of gone) leaves them.
        self.round_times = RoundTimes(fed, clock, gone_after_s=client_timeout_s)
        self._run_mode(self.round_times.mode)  # 'auto' starts in tuning.initial_mode's choice
        self.lock = threading.RLock()
        self.acc: Accumulator | None = None
        self.first_at: float | None = None
        self.uploads: dict[str, OrderedDict[str, PushOutcome]] = {}  # client -> its recent upload ids
        # Unix time the initial model was installed: where the clients' run-time learning-rate schedule starts.
        # A re-seed after total loss keeps it (the run goes on); checkpoints carry it.
        self.run_started_at = 0.0
        self.ledger: dict[str, ClientLedger] = {}
        self._pending: dict[str, float] = {}  # client -> weight buffered, credited when applied
        self._round_uploads: list[tuple[str, str]] = []  # (client, upload id) buffered in the open round
        self._dropped = ("", "")  # (reason, why) of the last dropped round
        self._dropped_now = False  # the last `_apply` dropped its round

    @property
    def reducer(self) -> Reducer | None:
        """The in-process engine's reducer (None on an engine that combines rounds elsewhere)."""
        return getattr(self.engine, "reducer", None)

    def payload_numel(self) -> int | None:
        """Elements the next delta must decode to (None before Θ0 is installed)."""
        return self.engine.payload_numel()

    def receiver(self, client_id: str, *, max_upload_bytes: int, max_init_numel: int):
        """What receives one push of `client_id` (its header, payload chunks and trailer)."""
        return self.engine.receiver(client_id, max_upload_bytes=max_upload_bytes, max_init_numel=max_init_numel)

    @property
    def buffered(self) -> int:
        return self.acc.count if self.acc else 0

    @property
    def mode(self) -> str:
        """The live aggregation mode, sync or async (with aggregation.mode 'auto', the one running now)."""
        return self.cfg.mode

    def _run_mode(self, mode: str) -> None:
        """Run `mode` from now on: admission, closing and the strategy read `cfg.mode`, so they get a copy of
        the configured settings with the live mode (they never see 'auto'); call only with nothing buffered."""
        configured = self.fed.aggregation
        self.cfg = configured if configured.mode == mode else configured.model_copy(update={"mode": mode})
        self.strategy.cfg = self.cfg

    # ---- admission --------------------------------------------------------------------------------

    def precheck(self, client_id: str, header: PushHeader, *, master: bool) -> PushOutcome | None:
        """Refuse early (before the payload crosses the WAN); return the outcome of a retried or stale upload."""
        with self.lock:
            done = self._recall(client_id, header.upload_id)
            if done is not None:
                return PushOutcome("DUPLICATE", self.model.version, done.staleness, done.weight, "already received")
            if header.init:
                if not master:
                    raise NotPermitted("not_master", "only the master client may send the initial model")
                if self.model.current() is not None:
                    raise NotReady("initialised", "the global model is already initialised")
                return None
            try:
                self._admit(header.base_version)
                self.engine.check_header(header)
            except StaleDelta as exc:
                return PushOutcome("STALE", self.model.version, message=exc.message)
            self.guard.admit(client_id, header.base_version)
            self.privacy.admit()
        return None

    def _admit(self, base_version: int):
        try:
            return admit(self.cfg, base_version, self.model.version)
        except ValueError as exc:
            raise InvalidPush("version", str(exc)) from exc

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

    def initialise(self, push) -> PushOutcome:
        """Adopt the master's Θ0 (Fig. 1 step 2) or a re-seed after total loss (§III-B4)."""
        header = push.header
        with self.lock:
            if self.model.current() is not None:
                self.engine.discard(push)
                raise NotReady("initialised", "the global model is already initialised")
            try:
                self.strategy.check_manifest(header.manifest)
            except ValueError as exc:
                self.engine.discard(push)
                raise InvalidPush("manifest", f"paradigm {self.fed.paradigm.name}: {exc}") from exc
            version = max(1, header.base_version)
            snap = self.engine.install(push, version)
            self.acc = None
            self.run_started_at = self.run_started_at or time.time()
            self.round_times.published(version)
            outcome = PushOutcome("APPLIED", version, message="initial model installed")
            self._remember(push.client_id, header.upload_id, outcome)
            self.engine.durable()
            log.info("event=init client=%s version=%d numel=%d", push.client_id, version, push.numel)
            self._emit(VersionComplete(snap))
        self._emit(VersionApplied(snap))
        return outcome

    def submit(self, push) -> PushOutcome:
        """Fold one validated payload into the round; may close it. A stale one comes back as STALE."""
        header = push.header
        published: list[Snapshot] = []
        with self.lock:
            done = self._recall(push.client_id, header.upload_id)
            if done is not None:
                self.engine.discard(push)
                return PushOutcome("DUPLICATE", self.model.version, done.staleness, done.weight, "already received")
            if self.model.current() is None:
                raise NotReady("no_model", "the PS has no model yet")
            self._keep(published, self.engine.settle())  # a version committed earlier goes out first
            current = self.model.current()
            try:
                adm = self._admit(header.base_version)
                self.engine.check_header(header)
                self.guard.admit(push.client_id, header.base_version)
                bounded = self.guard.bound(push, current, self.cfg.mode)
            except StaleDelta as exc:  # the version moved on while the payload was arriving
                self.engine.discard(push)
                return PushOutcome("STALE", self.model.version, message=exc.message)
            except DeltaRefused:  # a rule refused it (the round share, say): the client's round ends here
                self.engine.discard(push)
                self.round_times.put_off(push.client_id, header.base_version)
                raise
            except AlreadySent:
                self.engine.discard(push)
                raise
            if bounded.scale < 1.0:
                log.info("event=delta_bounded client=%r site=%r rule=%s norm=%.4g bounded_to=%.4g", push.client_id,
                         bounded.site, bounded.rule, push.norm, bounded.norm)
                self._emit(DeltaBounded(push.client_id, bounded.site, bounded.rule, push.norm, bounded.norm))
            bounded = self.privacy.bound(bounded, push.norm)
            acc = self.acc if self.acc is not None else self.engine.open_round(current)
            tokens = self.guard.vouched_tokens(header.num_tokens, header.local_steps)
            steps = self.guard.vouched_steps(header.local_steps)
            weight = self.engine.fold(acc, bounded, adm, num_tokens=tokens, local_steps=steps)
            self.acc = acc
            self._credit(push.client_id, header, adm, tokens=tokens, weight=weight, norm=bounded.norm,
                         history_norm=bounded.history_norm)
            outcome = PushOutcome("ACCEPTED", self.model.version, adm.staleness, weight)
            self._round_uploads.append((push.client_id, header.upload_id))
            self._remember(push.client_id, header.upload_id, outcome)
            if self._should_close():
                try:
                    snap = self._apply()
                except Unavailable as exc:  # the delta is folded and durable: the timer closes the round
                    log.warning("event=round_close_deferred reason=%r", exc.message)
                else:
                    if self._dropped_now:
                        self.uploads[push.client_id].pop(header.upload_id, None)  # it may be sent again
                        raise InvalidPush(self._dropped[0], f"the round this delta closed was dropped and the "
                                          f"previous version kept: {self._dropped[1]}")
                    if snap is not None:
                        outcome = PushOutcome("APPLIED", snap.version, adm.staleness, weight)
                        self._remember(push.client_id, header.upload_id, outcome)
                    self._keep(published, snap)
        self._announce(published)
        return outcome

    def _keep(self, published: list[Snapshot], snap: Snapshot | None) -> None:
        """A version just published (under the lock): its durability now, its listeners once the lock is let go."""
        if snap is not None:
            self._emit(VersionComplete(snap))
            published.append(snap)

    def _announce(self, published: list[Snapshot]) -> None:
        for snap in published:
            self._emit(VersionApplied(snap))

    def _emit(self, event: Event) -> None:
        """Tell every observer what happened."""
        for observer in self.observers:
            observer.notify(event)

    def _credit(self, client_id: str, header: PushHeader, adm, *, tokens: int, weight: float, norm: float,
                history_norm: float) -> None:
        """Account for a delta folded into the open round: guard, contributions, ledger, pending weight."""
        self.guard.accepted(client_id, header.base_version, history_norm, header.local_steps)
        self._emit(DeltaFolded(client_id, adm.staleness, tokens, weight, norm, self.cfg.clip_norm,
                               float(header.report.get("tokens_per_s") or 0.0), header.num_tokens))
        if self.first_at is None:
            self.first_at = self.clock()
        self.round_times.arrived(client_id, header.base_version)
        ledger = self.ledger.setdefault(client_id, ClientLedger())
        ledger.pushes += 1
        ledger.last_staleness = adm.staleness
        self._pending[client_id] = self._pending.get(client_id, 0.0) + weight

    def _should_close(self) -> bool:
        acc, version = self.acc, self.model.version
        if self.model.current() is None:
            return False
        reducer = self.reducer
        if reducer is not None and reducer.wants_close(version):  # another PS waits for this one's round sum
            return True
        if acc is None or (reducer is not None and not reducer.may_close(version)):
            return False
        return should_close(
            self.cfg, buffered=acc.count, clients_in_round=len(acc.clients),
            active_clients=self.sites.active_client_count(), first_at=self.first_at, now=self.clock(),
            straggler_timeout_s=self.round_times.straggler_timeout_s,
        )

    def tick(self) -> Snapshot | None:
        """Publish a version waiting on its engine, or close a round whose straggler/buffer timeout has passed
        (called by a timer thread)."""
        published: list[Snapshot] = []
        with self.lock:
            try:
                snap = self.engine.settle()
                if snap is None and self._should_close():
                    snap = self._apply()
            except Unavailable as exc:
                log.warning("event=round_close_deferred reason=%r", exc.message)
                snap = None
            self._keep(published, snap)
        self._announce(published)
        return snap

    def _apply(self) -> Snapshot | None:
        """Close the open round on the engine, account for it, publish (Algorithm 1, step 13).

        None: the round was dropped (`_dropped_now`, nothing of it is in the model), or its version is
        committed and the engine publishes it later (`settle`)."""
        self._dropped_now = False
        current = self.model.current()
        assert current is not None
        closed = self.engine.close(self.acc, current)
        if closed.dropped is not None:
            return self._drop_round(closed.count, closed.dropped[1], closed.dropped[0])
        new_version = closed.version
        for client_id, weight in self._pending.items():
            self.ledger.setdefault(client_id, ClientLedger()).contribution += weight
        self._emit(RoundClosed(new_version, closed.count, closed.clients, closed.weight))
        for client_id, upload_id in self._round_uploads:  # buffered uploads are now part of a version
            done = self._recall(client_id, upload_id)
            if done is not None and done.status == "ACCEPTED":
                self.uploads[client_id][upload_id] = PushOutcome("APPLIED", new_version, done.staleness, done.weight,
                                                                 "applied in a later round")
        log.info("event=apply version=%d deltas=%d clients=%d weight=%.1f", new_version, closed.count,
                 closed.clients, closed.weight)
        self.acc, self.first_at, self._pending, self._round_uploads = None, None, {}, []
        self.guard.round_closed(applied=True)
        snap = self.engine.publish(closed, current.manifest)
        self.round_times.published(new_version)
        self.round_times.retune()
        if self.round_times.mode != self.cfg.mode:  # the safe point: the round just closed, nothing is buffered
            self._run_mode(self.round_times.mode)
        return snap

    def _drop_round(self, deltas: int, why: str, reason: str = "nonfinite_round") -> None:
        log.error("event=round_dropped version=%d deltas=%d reason=%r", self.model.version, deltas, why)
        self._dropped, self._dropped_now = (reason, why), True
        self.acc, self.first_at, self._pending, self._round_uploads = None, None, {}, []
        self.engine.reset_round()
        self.guard.round_closed(applied=False)
        self._emit(RoundDropped(reason, why, deltas))
        return None

    def downlink(self, snapshot: Snapshot, have_version: int = 0) -> Downlink:
        """What a client holding `have_version` is streamed for `snapshot` (the strategy decides)."""
        return self.engine.downlink(snapshot, have_version)

    # ---- durability -------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The engine's state, upload ids, ledger, contributions and the guard's.

        Buffered (ACCEPTED, not yet applied) deltas are not persisted, and neither are their upload ids:
        after a restart the client resends such a delta (it still holds it) and it must be taken again,
        not answered DUPLICATE — else a graceful stop (SIGTERM, a Kubernetes roll) would silently drop it.
        """
        with self.lock:
            return {
                **self.engine.state_dict(),
                "uploads": [
                    [c, u, o.status, o.version, o.staleness, o.weight]
                    for c, recent in self.uploads.items() for u, o in recent.items() if o.status != "ACCEPTED"
                ],
                "ledger": {k: asdict(v) for k, v in self.ledger.items()},
                "contributions": self.contributions.state_dict(),
                "guard": self.guard.state_dict(),
                "privacy": self.privacy.state_dict(),
                "run_started_at": self.run_started_at,
            }

    def load_bookkeeping(self, state: dict) -> None:
        """Upload ids, ledger, contributions and the guard's state from `state_dict`; no open round."""
        self.uploads = {}
        for client_id, upload_id, status, version, staleness, weight in state.get("uploads", []):
            self.uploads.setdefault(client_id, OrderedDict())[upload_id] = PushOutcome(status, version, staleness,
                                                                                       weight)
        self.ledger = {k: ClientLedger(**v) for k, v in state.get("ledger", {}).items()}
        self.contributions.load_state_dict(state.get("contributions", {}))
        self.guard.load_state_dict(state.get("guard", {}))
        self.privacy.load_state_dict(state.get("privacy", {}))
        self.run_started_at = float(state.get("run_started_at", 0.0))
        self.acc, self.first_at, self._pending, self._round_uploads = None, None, {}, []

    def resume(self, store: CheckpointStore) -> Resumed | None:
        """Load the newest durable state through the engine (None: nothing to resume)."""
        with self.lock:
            return self.engine.resume(store)

    def save(self, store: CheckpointStore, registry: dict) -> str:
        """Write the current version and this state durably (with `registry`); OSError if the disk refuses."""
        with self.lock:
            return self.engine.save(store, registry)

    def restore(self, snapshot_version: int, flat: np.ndarray, manifest: Manifest, state: dict) -> None:
        """Resume an in-process engine from a checkpoint: publish its model, reload strategy state and upload ids."""
        with self.lock:
            self.engine.restore(flat, manifest, state)
            self.load_bookkeeping(state)
            if self.round_times.restore_mode(state.get("mode")):
                self._run_mode(self.round_times.mode)
                log.info("event=autotune knob=aggregation_mode value=%s applied=true reason='restored from the "
                         "checkpoint'", self.cfg.mode)
            self.model.publish(snapshot_version, flat, manifest)
            self.round_times.published(snapshot_version)

    def adopt(self, snapshot_version: int, flat: np.ndarray, manifest: Manifest, strategy_state: dict) -> Snapshot:
        """Take another PS's model and strategy state (a multi-PS group member rejoining its ring).

        This PS's own clients stay: their upload ids and ledger are kept, and so is an open round's
        accumulator (its deltas are valid on the adopted version too, one version staler at most).
        """
        with self.lock:
            acc, first_at, pending, uploads = self.acc, self.first_at, self._pending, self._round_uploads
            self.strategy.install(flat.size, manifest)
            if strategy_state:
                self.strategy.load_state_dict(strategy_state)
            current = self.model.current()
            if current is not None and (current.flat.size != flat.size or current.manifest != manifest):
                acc, first_at, pending, uploads = None, None, {}, []  # another layout: nothing buffered fits
                self._emit(RoundDiscarded())
            self.acc, self.first_at, self._pending, self._round_uploads = acc, first_at, pending, uploads
            snap = self.model.publish(snapshot_version, flat, manifest)
            self.round_times.published(snapshot_version)
            log.info("event=adopt version=%d numel=%d", snapshot_version, flat.size)
        self._emit(VersionApplied(snap))
        return snap
