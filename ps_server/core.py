"""The parameter server's core, free of gRPC: sessions, clients, pushes, checkpoints, status.

The gRPC servicers (`grpc_api.py`) translate messages to these calls and domain errors to status
codes; everything here can be driven directly from tests.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from geofed.config import FederationConfig, ServerConfig
from geofed.manifest import Manifest, manifest_difference
from geofed.protocol.messages import PROGRESS_FIELDS
from geofed.tokenizer_identity import tokenizer_mismatch

from .aggregation.aggregator import Aggregator, PushOutcome
from .aggregation.contributions import Contributions
from .aggregation.engine import RoundEngine
from .aggregation.events import Event, VersionApplied, VersionComplete
from .checkpoint import CheckpointStore
from .errors import NotPermitted, ParadigmMismatch, PushRejected
from .global_model import GlobalModel, Snapshot
from .group import GroupTransport, build_group
from .ingest import PushHeader, PushReceiver, ReceivedPush
from .join_checks import (
    check_frozen_digest,
    check_tokenizer_declaration,
    frozen_key,
    settings_difference,
    settings_tokenizer,
)
from .metrics import PSMetrics, value_bits
from .registry import AuthError, Principal, Registry, Session
from .stream_slots import StreamSlots
from .waiting import Activity, NotWaiting, heartbeat_interval_s, not_waiting

log = logging.getLogger("geofed.ps")

MAX_INIT_NUMEL = 1 << 36  # 64 Gi parameters: the largest model a master may install
# A running client heartbeats every third of its session's life, at least every 15 s
# (client_agent.connection.ps_client); three missed heartbeats and its site has left.
PRESENT_HEARTBEATS = 3


def present_for_s(session_ttl_s: float) -> float:
    """How long after its clients' last call a site still counts as present: three of their heartbeat
    intervals (45 s at the default 300 s session TTL)."""
    return PRESENT_HEARTBEATS * heartbeat_interval_s(session_ttl_s)


def goodput_status(goodput: dict[str, float]) -> dict[str, float]:
    """The status fields of Contributions.goodput()."""
    return {"goodput": goodput["goodput"], "goodput_tokens_trained": int(goodput["tokens_received"]),
            "goodput_tokens_applied": int(goodput["tokens_applied"])}


@dataclass
class ClientState:
    """What the PS knows about one client id (across its sessions)."""

    client_id: str
    site: str
    last_seen: float = 0.0
    streams: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    report: dict = field(default_factory=dict)
    # For the status page: unix times, PS-observed.
    first_seen: float = field(default_factory=time.time)
    joins: int = 0
    push_started: float = 0.0
    push_finished: float = 0.0
    last_sync: float = 0.0  # when its last push completed
    last_delta: float = 0.0  # when its last delta (not the initial model) was taken
    last_push_s: float = 0.0  # that push's wall time on the PS (a sync's round trip)
    push_s_total: float = 0.0
    compression_ratio: float = 0.0  # encoded bytes / fp32 bytes of its last delta
    # What the sync round's waiting (ps_server.waiting) reads: unix times, 0 = never.
    progress: tuple[int, int, int] = (0, 0, 0)  # its last reported (base version, steps, tokens) of a round
    progress_at: float = 0.0  # when that last moved
    payload_at: float = 0.0  # when payload bytes of a push last arrived
    # The manifest its current session holds (named in its Join response, or in a transfer it received whole):
    # model transfers leave it out while it is the snapshot's.
    manifest_held: tuple = ()

    def push_done(self, ratio: float | None = None) -> None:
        """Its push ended (accepted, or refused when `ratio` is None)."""
        now = time.time()
        if self.push_started > self.push_finished:
            if ratio is not None:
                self.last_sync, self.last_push_s = now, now - self.push_started
                self.push_s_total += self.last_push_s
            self.push_finished = now
        if ratio is not None:
            self.compression_ratio = ratio


@dataclass(frozen=True)
class JoinResult:
    session: str
    session_ttl_s: float
    master: bool
    version: int
    rejoin_token: str
    rejoin_expires_at: float
    snapshot: Snapshot | None
    frozen_digest: str = ""  # the federation's, once a joined client declared one
    run_started_at: float = 0.0  # Unix time the initial model was installed (0: none yet)
    tokenizer: tuple[str, str] = ("", "")  # the federation's (name, sha256); empty while not known


class ParameterServerCore:
    """Composes registry, global model, aggregator, checkpoints and metrics.

    `engine`: where the aggregator's rounds run (`aggregation.engine`): in this process by default, or a
    `shards.engine.ShardedEngine` for the front of a sharded PS (whose model is the shards')."""

    def __init__(
        self, fed: FederationConfig, server: ServerConfig, admin_credential: str, metrics: PSMetrics | None = None,
        peers: GroupTransport | None = None, engine: RoundEngine | None = None,
    ) -> None:
        self.fed, self.server = fed, server
        self.metrics = metrics or PSMetrics()
        self.instance = secrets.token_hex(8)
        self.registry = Registry(
            admin_credential, session_ttl_s=server.session_ttl_s, master_client_id=server.master_client_id,
            max_client_ids_per_site=server.max_client_ids_per_site,
        )
        self.model: GlobalModel = engine.model if engine is not None else GlobalModel()
        self.clients: dict[str, ClientState] = {}
        self._clients_lock = threading.Lock()
        # Joins and admin calls persist the registry from several gRPC threads: one writer at a time, and the
        # state taken under the same lock, so an older snapshot never replaces a newer one on disk.
        self._registry_write_lock = threading.Lock()
        self.store = CheckpointStore(server.checkpoint_dir, keep=server.keep_checkpoints)
        self.group = build_group(fed, server, peers, self.model)  # multi-PS: ring all-reduce with the others
        self.aggregator = Aggregator(
            fed, self.model, sites=self, observers=(self.metrics, self),
            reducer=None if engine is not None else self.group.reducer, engine=engine,
            contributions=Contributions(server.contribution_window), client_timeout_s=server.client_timeout_s,
        )
        self.streams = StreamSlots(server.max_streams_per_session, server.max_streams_per_site,
                                   server.max_streams)
        self._round_listeners: list[Callable[[Snapshot], None]] = []  # e.g. the status page's loss history
        # Whom the sync round waits for (ps_server.waiting): the current version's publication, each client's
        # median round time as of then, and the clients not waited for now (logged once when they drop out).
        self._round_started_at = 0.0
        self._round_time_s: dict[str, float] = {}
        self._straggler_timeout_s = fed.aggregation.straggler_timeout_s  # the one in force (autotune)
        self._not_waiting: set[str] = set()
        self.metrics.set_tuning(self.aggregator.round_times)  # the mode running from the start, before any round
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self.settings_tokenizer = settings_tokenizer(fed.model)
        if self.settings_tokenizer is not None:
            log.info("event=tokenizer name=%r sha256=%s", *self.settings_tokenizer)

    # ---- lifecycle --------------------------------------------------------------------------------

    def resume(self) -> bool:
        """Load the newest valid checkpoint, if any; sessions start empty (clients re-Join)."""
        registry = self.store.load_registry()  # written on every credential change: the newest
        if registry is not None:
            self.registry.load_state_dict(registry)
        found = self.aggregator.resume(self.store)
        if found is None:
            log.info("event=start checkpoint=none registry=%s", registry is not None)
            return registry is not None
        if registry is None and found.registry is not None:
            self.registry.load_state_dict(found.registry)
        if found.version == 0:
            log.info("event=resume version=0 model=none sites=%d", len(self.registry.state_dict().get("sites", {})))
            return True
        self.metrics.global_version.set(found.version)
        with self.aggregator.lock:
            self.metrics.set_tuning(self.aggregator.round_times)  # an 'auto' PS resumes in its checkpoint's mode
        log.info("event=resume version=%d numel=%d", found.version, self.aggregator.payload_numel() or 0)
        return True

    def start_timer(self, period_s: float = 0.25) -> None:
        """Fire straggler / buffer timeouts without waiting for traffic."""

        def run() -> None:
            while not self._stop.wait(period_s):
                try:
                    self.aggregator.tick()
                except Exception:  # keep the timer alive; the error is logged with its traceback
                    log.exception("event=tick_failed")

        self._timer = threading.Thread(target=run, name="geofed-round-timer", daemon=True)
        self._timer.start()
        self.group.start(self.aggregator, self._stop)

    def stop(self) -> None:
        """Stop the timer, release streams and write a final checkpoint (SIGTERM path)."""
        self._stop.set()
        self.model.close()
        self.checkpoint()

    def _should_checkpoint(self, version: int) -> bool:
        """The retention promise (§III-B4 keeps the model durable): every version divisible by checkpoint_every."""
        return version % self.server.checkpoint_every == 0

    def _maybe_checkpoint(self, snap: Snapshot) -> None:
        """Checkpoint `snap` if promised; runs under the aggregator lock, at the end of the update that published it.

        Checkpointing once the pushing thread has let go of the lock would write whatever version is current by
        then: under versions in quick succession a promised one would be skipped and a later one written twice.
        """
        if self._should_checkpoint(snap.version):
            self.checkpoint()

    def checkpoint(self) -> bool:
        """Write a checkpoint of the current version now; False (and a metric) if the disk refuses."""
        with self.aggregator.lock:  # the model and the aggregator state of one version, nothing newer
            version = self.model.version
            try:
                path = self.aggregator.save(self.store, self.registry.state_dict())
            except OSError as exc:
                self.metrics.checkpoint_failures.inc()
                log.error("event=checkpoint_failed version=%d error=%s", version, exc)
                return False
        log.info("event=checkpoint version=%d path=%s", version, path)
        return True

    def notify(self, event: Event) -> None:
        """The aggregator's new versions: a checkpoint of one whose state is complete (under its lock), the
        metrics and round listeners of one it published."""
        match event:
            case VersionComplete():
                self._maybe_checkpoint(event.snapshot)
            case VersionApplied():
                self._on_apply(event.snapshot)

    def _on_apply(self, snap: Snapshot) -> None:
        self.metrics.global_version.set(snap.version)
        with self.aggregator.lock:
            times = self.aggregator.round_times
            self._round_started_at, self._round_time_s = time.time(), times.per_client()
            self._straggler_timeout_s = times.straggler_timeout_s
        for client_id, ledger in self.aggregator.ledger.items():
            self.metrics.contribution.labels(client_id).set(ledger.contribution)
        for listener in self._round_listeners:
            listener(snap)
        self.metrics.set_contributions(self.aggregator.contributions.report(), self.site_of)
        self.metrics.set_goodput(self.aggregator.contributions.goodput())
        self.metrics.set_privacy(self.aggregator.privacy.status())
        with self.aggregator.lock:
            self.metrics.set_tuning(self.aggregator.round_times)

    def on_round(self, listener: Callable[[Snapshot], None]) -> None:
        """Call `listener(snapshot)` after each published version (the client reports it closed are recorded)."""
        self._round_listeners.append(listener)

    # ---- clients ----------------------------------------------------------------------------------

    def _client(self, session: Session) -> ClientState:
        with self._clients_lock:
            state = self.clients.get(session.client_id)
            if state is None:
                state = self.clients[session.client_id] = ClientState(session.client_id, session.site)
                self.aggregator.contributions.seen(session.client_id)
            state.last_seen = time.time()
            return state

    def unit_of(self, client_id: str) -> str:
        """The unit of trust of `client_id`: its site, or the client itself when the admin enrolled it alone."""
        client = self.clients.get(client_id)
        return (client.site or client_id) if client is not None else client_id

    def active_client_count(self) -> int:
        """Sites the sync quorum waits for: with a live session seen within client_timeout_s and a client the PS
        sees training (ps_server.waiting). A session that shows no progress is not waited for once its silence
        bound has passed; one site counts once."""
        now = time.time()
        horizon = now - self.server.client_timeout_s
        live = {s.client_id for s in self.registry.live_sessions()}
        heartbeat_s = heartbeat_interval_s(self.registry.session_ttl_s)
        waited: set[str] = set()
        quiet: list[NotWaiting] = []
        with self._clients_lock:
            for c in self.clients.values():
                if c.client_id not in live or c.last_seen < horizon:
                    continue
                uploading = c.push_started > c.push_finished
                activity = Activity(c.client_id, c.first_seen, c.progress_at, c.last_delta,
                                    max(c.push_started, c.payload_at) if uploading else 0.0)
                why = not_waiting(activity, now=now, round_start=self._round_started_at,
                                  round_time_s=self._round_time_s.get(c.client_id), heartbeat_s=heartbeat_s,
                                  margin=self.fed.autotune.straggler_margin,
                                  straggler_timeout_s=self._straggler_timeout_s)
                if why is None:
                    waited.add(c.site or c.client_id)
                else:
                    quiet.append(why)
            self._note_not_waiting(quiet)
        return len(waited)

    def _note_not_waiting(self, quiet: list[NotWaiting]) -> None:
        """Log and count each client as it drops out of the clients a sync round waits for (under _clients_lock);
        an async PS waits for no one, so it logs nothing."""
        if self.aggregator.mode != "sync":
            self._not_waiting = set()
            return
        for q in quiet:
            if q.client_id in self._not_waiting:
                continue
            self.metrics.round_not_waiting.labels(q.reason).inc()
            log.info("event=round_not_waiting session=%s reason=%s silent_s=%.1f bound_s=%.1f bound_from=%s "
                     "version=%d", q.client_id, q.reason, q.silent_s, q.bound_s, q.bound_from, self.model.version)
        self._not_waiting = {q.client_id for q in quiet}

    def persist_registry(self) -> None:
        """Write the credential registry now; a failure is logged and counted, never fatal."""
        try:
            with self._registry_write_lock:
                self.store.save_registry(self.registry.state_dict())
        except OSError as exc:
            self.metrics.checkpoint_failures.inc()
            log.error("event=registry_save_failed error=%s", exc)

    def mint_token(self, principal: Principal, client_id: str, site: str, ttl_s: float, master: bool):
        out = self.registry.mint_token(principal, client_id, site, ttl_s, master=master)
        self.persist_registry()
        return out

    def create_site(self, principal: Principal, site: str, max_client_ids: int = 0, *, rotate: bool = False) -> str:
        """Issue the site credential; `max_client_ids` client ids it may mint (0: max_client_ids_per_site)."""
        out = self.registry.create_site(principal, site, rotate=rotate)
        self.registry.set_site_quota(principal, site, max_client_ids)
        self.persist_registry()
        return out

    def revoke_site(self, principal: Principal, site: str) -> bool:
        out = self.registry.revoke_site(principal, site)
        self.persist_registry()
        return out

    def revoke_client(self, principal: Principal, client_id: str, token: str = "") -> tuple[int, int]:
        out = self.registry.revoke_client(principal, client_id, token)
        self.persist_registry()
        return out

    def check_client_layout(self, paradigm: str, manifest: Manifest) -> None:
        """Refuse (ParadigmMismatch) a client that declares another paradigm or layout than the federation's."""
        if paradigm and paradigm != self.fed.paradigm.name:
            raise ParadigmMismatch(
                f"this client runs paradigm {paradigm!r} but the federation runs {self.fed.paradigm.name!r}"
            )
        snap = self.model.current()
        if manifest and snap is not None:
            difference = manifest_difference(manifest, snap.manifest)
            if difference is not None:
                raise ParadigmMismatch(f"the client's exchanged parameters differ from the federation's: {difference}")

    @property
    def tokenizer(self) -> tuple[str, str]:
        """The federation's tokenizer (name, sha256): its settings', else the one its master declared."""
        return self.settings_tokenizer or self.registry.master_tokenizer

    def join(self, token: str, client_id: str, peer: str = "", *, paradigm: str = "",
             manifest: Manifest = (), group: str = "", paradigm_json: str = "",
             frozen_digest: str = "", tokenizer: tuple[str, str] = ("", "")) -> JoinResult:
        self.check_client_layout(paradigm, manifest)  # before the one-time token is consumed
        difference = settings_difference(paradigm_json, self.fed)
        if difference is not None:
            raise ParadigmMismatch(f"the client's paradigm settings differ from the federation's: {difference}")
        check_frozen_digest(frozen_digest)
        check_tokenizer_declaration(tokenizer[1], tokenizer[0])
        self.group.check_client_group(group)
        bound = peer if self.server.bind_sessions else ""
        session_secret, session, rejoin = self.registry.join(
            token, client_id, bound, frozen_digest=frozen_digest, frozen_key=frozen_key(self.fed),
            tokenizer=tokenizer, settings_tokenizer=self.settings_tokenizer,
        )
        self.persist_registry()  # the consumed token and the new rejoin token must survive a crash
        client = self._client(session)
        client.joins += 1
        snap = self.model.current()
        client.manifest_held = tuple(snap.manifest) if snap is not None else ()
        master = session.master and snap is None
        log.info("event=join client=%s site=%s master=%s version=%d", client_id, session.site, master,
                 self.model.version)
        return JoinResult(
            session_secret, self.registry.session_ttl_s, master, self.model.version, rejoin,
            time.time() + self.registry.rejoin_ttl_s, snap, self.registry.frozen_digest(frozen_key(self.fed)),
            self.aggregator.run_started_at, self.tokenizer,
        )

    def preview(self, token: str, client_id: str, *, paradigm: str = "", manifest: Manifest = (),
                group: str = "", paradigm_json: str = "", frozen_digest: str = "",
                tokenizer: tuple[str, str] = ("", "")) -> JoinResult:
        """What `join` would answer, checked the same way, with no session and the token left unused. A
        tokenizer other than the federation's is not refused here: the answer names the federation's, and
        the client refuses itself with what only it knows (its own flags and files); its Join is refused."""
        self.check_client_layout(paradigm, manifest)
        difference = settings_difference(paradigm_json, self.fed)
        if difference is not None:
            raise ParadigmMismatch(f"the client's paradigm settings differ from the federation's: {difference}")
        check_frozen_digest(frozen_digest)
        check_tokenizer_declaration(tokenizer[1], tokenizer[0])
        self.group.check_client_group(group)
        record = self.registry.check(token, client_id)
        snap = self.model.current()
        return JoinResult("", self.registry.session_ttl_s, record.master and snap is None, self.model.version, "",
                          0.0, snap, tokenizer=self.tokenizer)

    def authenticate(self, credential: str, rpc: str, peer: str = "") -> Session:
        try:
            session = self.registry.session(credential, peer)
        except AuthError:
            self.metrics.auth_failures.labels(rpc).inc()
            raise
        self._client(session)
        return session

    def heartbeat(self, credential: str, report: dict, peer: str = "") -> Session:
        session = self.registry.renew(credential, peer)
        self.record_report(self._client(session), report)
        return session

    def record_report(self, client: ClientState, report: dict) -> None:
        if not report:
            return
        # The paradigm's own metrics come with evaluations only: a report without them keeps the last ones.
        metrics = report.get("paradigm_metrics") or client.report.get("paradigm_metrics", {})
        report = {**report, "paradigm_metrics": metrics}
        client.report = report
        mark = tuple(int(report.get(k) or 0) for k in PROGRESS_FIELDS)
        if mark[0] > 0 and mark != client.progress:  # a round in hand that moved since the last report
            client.progress, client.progress_at = mark, time.time()
        if report.get("train_loss"):
            self.metrics.train_loss.labels(client.client_id).set(report["train_loss"])
        if report.get("eval_loss"):
            self.metrics.eval_loss.labels(client.client_id).set(report["eval_loss"])
        if report.get("tokens_per_s"):
            self.metrics.tokens_per_s.labels(client.client_id).set(report["tokens_per_s"])

    def stream_opened(self, session: Session) -> ClientState:
        client = self._client(session)
        with self._clients_lock:
            client.streams += 1
        self.metrics.connected_clients.set(self.connected_count())
        return client

    def stream_closed(self, client: ClientState) -> None:
        with self._clients_lock:
            client.streams = max(0, client.streams - 1)
        self.metrics.connected_clients.set(self.connected_count())

    def stream_refused(self, exc, client_id: str, rpc: str) -> None:
        """A long-lived call over a stream cap (`exc`: StreamCapExceeded): counted and logged, never served."""
        self.metrics.refused_calls.labels(rpc, exc.reason).inc()
        if rpc == "PushDelta":
            self.metrics.rejected.labels(exc.reason).inc()
        log.warning("event=stream_refused client=%r rpc=%s reason=%s", client_id, rpc, exc.reason)

    def site_present(self, site: str) -> bool:
        """Whether a client of `site` called the PS (a heartbeat, a push, a model fetch) within `present_for_s`
        of the session TTL: the round share's notion of a site still taking part."""
        horizon = time.time() - present_for_s(self.registry.session_ttl_s)
        with self._clients_lock:
            return any(c.last_seen >= horizon and (c.site or c.client_id) == site for c in self.clients.values())

    def connected_count(self) -> int:
        with self._clients_lock:
            return sum(1 for c in self.clients.values() if c.streams > 0)

    # ---- pushes -----------------------------------------------------------------------------------

    def begin_push(self, session: Session, header: PushHeader) -> tuple[PushReceiver | None, PushOutcome | None]:
        """Check a push's header; returns a receiver, or the outcome of an already-received upload."""
        self.check_session_tokenizer(session)
        done = self.aggregator.precheck(session.client_id, header, master=session.master)
        if done is not None:
            if not header.init:  # trained all the same (a stale delta refused on its header counts against goodput)
                self._received(session.client_id, header)
            self._count_stale(session.client_id, done)
            return None, done
        receiver = self.aggregator.receiver(session.client_id, max_upload_bytes=self.server.max_upload_bytes,
                                            max_init_numel=MAX_INIT_NUMEL)
        receiver.on_header(header)
        self._client(session).push_started = time.time()
        return receiver, None

    def check_session_tokenizer(self, session: Session) -> None:
        """Refuse (NotPermitted) the pushes of a session that declared another tokenizer than the federation's:
        one that joined before the master named the federation's."""
        federation, declared = self.tokenizer, session.tokenizer
        if declared[1] and federation[1] and declared[1] != federation[1]:
            raise NotPermitted("tokenizer", tokenizer_mismatch(*declared, *federation))

    def complete_push(self, session: Session, push: ReceivedPush) -> PushOutcome:
        """Fold a fully received push in and account for it."""
        client = self._client(session)
        self.record_report(client, push.header.report)  # first: a version this push closes plots its loss
        if not push.header.init:
            self._received(client.client_id, push.header)
        try:
            t0 = time.perf_counter()
            if push.header.init:
                outcome = self.aggregator.initialise(push)
            else:
                outcome = self.aggregator.submit(push)
            self.metrics.aggregate_seconds.observe(time.perf_counter() - t0)
        finally:
            push.close()
        self._count_stale(client.client_id, outcome)
        self.metrics.compression_ratio.labels(client.client_id).set(push.header.payload_bytes / max(1, 4 * push.numel))
        if (bits := value_bits(push.codec_name)) is not None:
            self.metrics.delta_bits.labels(client.client_id).set(bits)
        self.metrics.local_steps.labels(client.client_id).set(push.header.local_steps)
        client.push_done(push.header.payload_bytes / max(1, 4 * push.numel))
        if not push.header.init and outcome.status in ("ACCEPTED", "APPLIED"):
            client.last_delta = time.time()
        log.info(
            "event=push client=%s upload=%s status=%s version=%d staleness=%d bytes=%d codec=%s",
            client.client_id, push.header.upload_id, outcome.status, outcome.version, outcome.staleness,
            push.header.payload_bytes, push.codec_name,
        )
        return outcome

    def _received(self, client_id: str, header: PushHeader) -> None:
        """Goodput's denominator: the tokens the client reported training for a delta that reached the PS."""
        contributions = self.aggregator.contributions
        contributions.received(client_id, header.upload_id, header.num_tokens)
        self.metrics.set_goodput(contributions.goodput())

    def _count_stale(self, client_id: str, outcome: PushOutcome) -> None:
        if outcome.status == "STALE":
            self.metrics.rejected.labels("stale").inc()
            log.info("event=push_stale client=%r detail=%r", client_id, outcome.message)

    def reject(self, err: PushRejected, client_id: str) -> None:
        self.metrics.rejected.labels(err.reason).inc()
        if client_id in self.clients:
            self.clients[client_id].push_done()
        log.warning("event=push_rejected client=%r reason=%s message=%r", client_id, err.reason, err.message)

    # ---- admin ------------------------------------------------------------------------------------

    def admin_principal(self, credential: str) -> Principal:
        try:
            return self.registry.authenticate_admin(credential)
        except AuthError:
            self.metrics.auth_failures.labels("admin").inc()
            raise

    def status(self) -> dict:
        snap = self.model.current()
        reports = [c.report for c in self.clients.values() if c.report]
        train = [r["train_loss"] for r in reports if r.get("train_loss")]
        evals = [r["eval_loss"] for r in reports if r.get("eval_loss")]
        return {
            "version": self.model.version,
            "connected_clients": self.connected_count(),
            "active_clients": self.active_client_count(),
            "known_clients": len(self.clients),
            "mode": self.aggregator.mode,  # the live mode (aggregation.mode 'auto' switches it)
            "buffered_deltas": self.aggregator.buffered,
            "last_train_loss": sum(train) / len(train) if train else 0.0,
            "last_eval_loss": sum(evals) / len(evals) if evals else 0.0,
            "server_instance": self.instance,
            "has_model": snap is not None,
            "num_parameters": snap.flat.size if snap else 0,
            "federation": self.fed.name,
            **goodput_status(self.aggregator.contributions.goodput()),
            **self.group.status(),
            **self.aggregator.engine.status(),
            **self.aggregator.privacy.status(),
        }

    def client_list(self) -> list[dict]:
        with self._clients_lock:
            clients = list(self.clients.values())
        out = []
        for c in clients:
            ledger = self.aggregator.ledger.get(c.client_id)
            out.append({
                "client_id": c.client_id, "site": c.site, "connected": c.streams > 0, "last_seen": c.last_seen,
                "pushes": ledger.pushes if ledger else 0, "bytes_in": c.bytes_in, "bytes_out": c.bytes_out,
                "report": dict(c.report), "contribution": ledger.contribution if ledger else 0.0,
            })
        return out

    def site_of(self, client_id: str) -> str:
        client = self.clients.get(client_id)
        return client.site if client else ""
