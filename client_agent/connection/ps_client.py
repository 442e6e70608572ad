"""The client's side of the wire: Join, a resumable StreamModel receiver, idempotent PushDelta, heartbeats.

Only outbound connections (paper §III-B2). A broken model download resumes at the byte it reached;
a failed push is retransmitted with the same upload id, so the PS applies it at most once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import grpc

from geofed.config import FederationConfig
from geofed.frozen_digest import frozen_mismatch
from geofed.manifest import Manifest
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed.protocol.channel import open_channel
from geofed.protocol.messages import manifest_from_proto, manifest_to_proto, report_to_proto
from geofed.protocol.transport_probe import transport_mismatch

from ..errors import DeferredDeltaError, JoinError, PushError, StaleDeltaError
from ..progress import RoundProgress
from .backoff import Backoff
from .join_spec import JoinSpec, Timeouts
from .link_tuner import LinkMeter
from .model_stream import ModelStream
from .rejoin_hold import GlobalVersion
from .rejoin_token import RejoinToken
from .upload import PushReceipt, Upload

log = logging.getLogger("geofed.client")

PAYLOAD_CHUNK = 1 << 20  # bytes per PushDelta payload message (well under gRPC's 4 MiB default)
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DATA_LOSS,
}


class PSClient:
    """Connection to one PS for one client id; thread-safe for one pusher + background threads."""

    def __init__(
        self, address: str, client_id: str, token_source: Callable[[], str], *, insecure: bool = False,
        ca_cert: bytes | None = None, client_cert: bytes | None = None, client_key: bytes | None = None,
        state_dir: str | Path | None = None, rpc_timeout_s: float = 30.0, push_timeout_s: float = 3600.0,
        join_deadline_s: float = 60.0, retry_budget_s: float = 600.0,
    ) -> None:
        self.address, self.client_id = address, client_id
        self.token_source = token_source
        self.channel = open_channel(address, insecure=insecure, ca_cert=ca_cert, client_cert=client_cert,
                                    client_key=client_key)
        # How to dial the federation's other services (fsl-sage's trainer) the way we dial the PS.
        self.channel_options = {"insecure": insecure, "ca_cert": ca_cert, "client_cert": client_cert,
                                "client_key": client_key}
        self.stub = pb_grpc.ParameterServerStub(self.channel)
        self.timeouts = Timeouts(rpc_timeout_s, push_timeout_s, join_deadline_s, retry_budget_s)
        self._push_lock = threading.RLock()
        self._pending: Upload | None = None
        self._spec = JoinSpec()
        self.session: str | None = None
        self.session_ttl_s = 60.0
        self.federation: FederationConfig | None = None
        self.master = False
        self.master_client_id = ""
        self.server_instance = ""
        self.join_version = 0
        self.manifest: Manifest = ()
        self.frozen_digest = ""  # the federation's, as the last Join response named it
        self.run_started_at = 0.0  # Unix time the PS installed the initial model, as the last Join named it
        # A sharded PS: inner shard bounds (frames must end there) and the map's digest, learnt at Join and
        # on every model transfer; a push cut for an older map comes back STALE.
        self.shard_cuts: tuple[int, ...] = ()
        self.shard_map = b""
        self._rejoin = RejoinToken(state_dir)
        self._join_lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self.report: dict = {}  # the client's last round, sent with every heartbeat and push
        self.progress = RoundProgress()  # the round in hand, sent with every heartbeat
        self.bytes_sent = 0
        # The aggregation mode the PS said it runs in its last push response ("" until one says): with
        # aggregation.mode 'auto' it changes between rounds, and the client waits the way the PS runs now.
        self.aggregation_mode = ""
        self.link = LinkMeter()  # rates, RTT and sizes the tuners plan with
        self.stream = ModelStream(self, self._stop)

    # ---- Join ---------------------------------------------------------------------------------------

    def preview(self, spec: JoinSpec | None = None) -> pb.JoinResponse:
        """Ask what a Join would answer (federation, version, master) without spending a token.

        The PS checks the token, group and declarations as for a Join and answers with no session. A PS that
        knows no preview answers with a real Join: then it is adopted (the client is joined, `session` set)."""
        if spec is not None:
            self._spec = spec
        with self._join_lock:
            r, source = self._ask(preview=True)
            if r.session:
                self._adopt_join(r)
                log.info("event=joined client=%s via=%s version=%d master=%s", self.client_id, source, r.version,
                         r.master)
            return r

    def join(self, spec: JoinSpec | None = None, *, rejoin_only: bool = False) -> None:
        """Join with the freshest credential we have: the given token first, then the rejoin token.

        `spec` is kept: a rejoin after the PS refused the session declares the same. `rejoin_only`: the
        one-time token is known to be spent (this client joined with it already)."""
        if spec is not None:
            self._spec = spec
        with self._join_lock:
            r, source = self._ask(preview=False, rejoin_only=rejoin_only)
            self._adopt_join(r)
            log.info("event=joined client=%s via=%s version=%d master=%s", self.client_id, source, r.version,
                     r.master)

    def _ask(self, preview: bool, rejoin_only: bool = False) -> tuple[pb.JoinResponse, str]:
        """One answered JoinRequest, trying each credential in turn and retrying an unreachable PS with backoff
        until the Join deadline; returns the response and which credential served."""
        errors = []
        backoff = Backoff()
        deadline = time.monotonic() + self.timeouts.join_s
        candidates = [c for c in self._token_candidates() if c[0] == "rejoin" or not rejoin_only]
        while True:
            for source, token in candidates:
                try:
                    request = pb.JoinRequest(token=token, client_id=self.client_id, paradigm=self._spec.paradigm,
                                             manifest=manifest_to_proto(self._spec.manifest),
                                             group=self._spec.group, paradigm_json=self._spec.paradigm_json,
                                             frozen_digest=self._spec.frozen_digest, preview=preview,
                                             tokenizer=self._spec.tokenizer,
                                             tokenizer_sha256=self._spec.tokenizer_sha256)
                    return self.stub.Join(request, timeout=self.timeouts.rpc_s), source
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:  # another paradigm or layout
                        raise JoinError(f"the parameter server refused this client: {exc.details()}") from None
                    if exc.code() in RETRYABLE:
                        if exc.code() == grpc.StatusCode.UNAVAILABLE and not errors:
                            self._raise_on_transport_mismatch()
                        errors.append(f"{source}: {exc.code().name}")
                        break  # PS unreachable: back off, then try the same candidates again
                    errors.append(f"{source} token refused ({exc.details()})")
                    continue
            else:
                raise JoinError("; ".join(errors) or "no token available (give --token-file or GEOFED_TOKEN)")
            if time.monotonic() > deadline:
                raise JoinError(f"parameter server {self.address} unreachable: " + "; ".join(errors[-3:]))
            time.sleep(backoff.next_delay())

    def _raise_on_transport_mismatch(self) -> None:
        """JoinError naming the fix when the PS speaks TLS and we plaintext or the other way round: retrying
        until the Join deadline cannot help, and the token stays unspent."""
        if mismatch := transport_mismatch(self.address, insecure=self.channel_options["insecure"]):
            raise JoinError(mismatch)

    def declare_build(self, paradigm_json: str, frozen_digest: str) -> None:
        """After Join: declare the settings and frozen digest of the model this client built. A federation
        with another digest refuses it (JoinError naming both); one without a digest yet is told this one
        (a Join with the rejoin token), which the PS then holds for every later client."""
        if not frozen_digest or (self._spec.frozen_digest == frozen_digest and self.frozen_digest == frozen_digest):
            return
        if self.frozen_digest and self.frozen_digest != frozen_digest:
            raise JoinError(
                f"the parameter server refused this client: {frozen_mismatch(frozen_digest, self.frozen_digest)}"
            )
        declared = dataclasses.replace(self._spec, paradigm_json=paradigm_json, frozen_digest=frozen_digest)
        if self.frozen_digest == frozen_digest:
            self._spec = declared  # nothing new for the PS: later rejoins declare it
            return
        self.join(declared, rejoin_only=True)

    def _token_candidates(self) -> list[tuple[str, str]]:
        out = []
        try:
            token = self.token_source()
        except (OSError, KeyError, ValueError) as exc:
            log.warning("event=token_unavailable error=%r", str(exc))
            token = ""
        if token:
            out.append(("one-time", token))
        if self._rejoin.token:
            out.append(("rejoin", self._rejoin.token))
        return out

    def _adopt_join(self, r: pb.JoinResponse) -> None:
        restarted = bool(self.server_instance) and r.server_instance != self.server_instance
        self.session = r.session
        self.session_ttl_s = r.session_ttl_s
        self.federation = FederationConfig.model_validate_json(r.federation_json)
        self.stream.on_demand = not self.federation.downlink.prefetch
        self.master = r.master
        self.master_client_id = r.master_client_id  # "" when the PS names none
        self.server_instance = r.server_instance
        self.join_version = r.version
        self.stream.version_seen = max(self.stream.version_seen, r.version)
        self.manifest = manifest_from_proto(r.manifest)
        self.frozen_digest = r.frozen_digest
        self.run_started_at = r.run_started_at or self.run_started_at
        self.learn_shard_map(r)
        self._rejoin.save(r.rejoin_token)
        if restarted:
            # The PS came back from a checkpoint: our model may be newer than its version, so take
            # whatever it streams next, and resend a delta it had accepted but perhaps not applied.
            log.info("event=ps_restarted version=%d pending=%s", r.version, self._pending is not None)
            self.stream.forget()
            if self._pending is not None:
                threading.Thread(target=self._resend_pending, name="geofed-resend", daemon=True).start()

    def metadata(self):
        if self.session is None:
            raise JoinError("not joined")
        return bearer(self.session)

    def rejoin_after(self, exc: grpc.RpcError) -> None:
        log.warning("event=session_refused client=%s detail=%r", self.client_id, exc.details())
        self.join()

    def learn_shard_map(self, msg: pb.JoinResponse | pb.ModelChunk) -> None:
        if msg.shard_map:
            self.shard_cuts, self.shard_map = tuple(msg.shard_bounds)[1:-1], msg.shard_map

    # ---- background: model stream + heartbeat ------------------------------------------------------

    def start(self) -> None:
        """Open the long-lived model stream and the heartbeat loop."""
        self.stream.start(self._spec.decoders(self.federation) if self.federation is not None else {})
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="geofed-heartbeat", daemon=True)
        self._heartbeat.start()

    def latest(self) -> GlobalVersion | None:
        return self.stream.latest

    def hold(self, kept: GlobalVersion) -> str:
        """Before `start()`: a global model kept from before a relaunch (see `RejoinHold.offer`)."""
        return self.stream.offer(kept)

    def wait_for_fresh(self, than: GlobalVersion | None, timeout: float | None = None) -> GlobalVersion | None:
        """Block until a model other than `than` has been received (any version: used after a resync)."""
        return self.stream.wait_for_fresh(than, timeout)

    def wait_for_version(self, newer_than: int, timeout: float | None = None) -> GlobalVersion | None:
        """Block until a global version > `newer_than` has been fully received."""
        return self.stream.wait_for_version(newer_than, timeout)

    @property
    def bytes_received(self) -> int:
        return self.stream.bytes_received

    @property
    def model_resumes(self) -> int:
        return self.stream.resumes

    @property
    def on_demand(self) -> bool:
        """Models fetched only while someone waits (federation.downlink.prefetch off); set by each Join."""
        return self.stream.on_demand

    @on_demand.setter
    def on_demand(self, value: bool) -> None:
        self.stream.on_demand = value

    def _heartbeat_interval(self) -> float:
        """A third of the session's life; every 2 s while an ACCEPTED delta waits to be folded in.

        With on-demand model fetches no stream breaks when the PS restarts, so the heartbeat is what notices
        the new instance (UNAUTHENTICATED → re-join → resend of the buffered delta): it must not take minutes.
        """
        period = max(1.0, self.session_ttl_s / 3)
        return min(period, 2.0) if self._pending is not None else min(period, 15.0)

    def _heartbeat_loop(self) -> None:
        last = time.monotonic()
        # Tick every second and compare with the interval *now*: a delta buffered mid-wait shortens it at once.
        while not self._stop.wait(1.0):
            if time.monotonic() - last < self._heartbeat_interval():
                continue
            last = time.monotonic()
            try:
                t_call = time.monotonic()
                report = {**self.report, **self.progress.report()}
                self.stub.Heartbeat(pb.HeartbeatRequest(report=report_to_proto(report)),
                                    metadata=self.metadata(), timeout=self.timeouts.rpc_s)
                # A small unary RPC: its wall time is the round trip (plus the PS's bookkeeping, negligible).
                self.link.round_trip(time.monotonic() - t_call)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    try:
                        self.rejoin_after(exc)
                    except JoinError as err:
                        log.error("event=rejoin_failed error=%r", str(err))
            except JoinError:
                pass

    # ---- PushDelta ----------------------------------------------------------------------------------

    def push(self, **kwargs) -> PushReceipt:
        """Spool the encoded payload, then send it; retransmit with the same upload id on failure."""
        return self.send(self.prepare(**kwargs))

    def prepare(
        self, *, base_version: int, codec_header: bytes, frames: Iterable[bytes], num_tokens: int = 0,
        num_samples: int = 0, local_steps: int = 1, init: bool = False, manifest: Manifest | None = None,
    ) -> Upload:
        """Spool the encoded payload under a fresh upload id, ready to `send` (or to save first, see `Upload`)."""
        spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115 - may outlive this call
        sha = hashlib.sha256()
        for frame in frames:
            sha.update(frame)
            spool.write(frame)
        size = spool.tell()
        header = pb.DeltaHeader(
            base_version=base_version, upload_id=uuid.uuid4().hex, codec_header=codec_header, payload_bytes=size,
            num_tokens=num_tokens, num_samples=num_samples, local_steps=local_steps, init=init,
            report=report_to_proto(self.report), shard_map=b"" if init else self.shard_map,
        )
        if manifest:
            header.manifest.extend(manifest_to_proto(manifest))
        return Upload(header, spool, sha.digest())

    def send(self, upload: Upload) -> PushReceipt:
        """Send a prepared (or restored) upload; an upload id the PS already took is answered DUPLICATE."""
        keep = False
        try:
            receipt = self._send(upload)
            if receipt.status == "ACCEPTED":
                # Buffered, not yet in a version: if the PS dies before folding it in, resend it (same id).
                upload.instance, upload.accepted_at_version = self.server_instance, receipt.version
                self._set_pending(upload)
                keep = True
            return receipt
        finally:
            if not keep:
                upload.spool.close()

    def _send(self, upload: Upload) -> PushReceipt:
        """PushDelta with retransmission until `Timeouts.retry_s` runs out (the upload id keeps it idempotent)."""
        backoff = Backoff(cap_s=10.0)
        t0 = time.monotonic()
        attempt = 0
        with self._push_lock:
            while True:
                attempt += 1
                try:
                    t_send = time.monotonic()
                    result = self.stub.PushDelta(self._messages(upload.header, upload.spool, upload.digest),
                                                 metadata=self.metadata(), timeout=self.timeouts.push_s)
                except grpc.RpcError as exc:
                    code = exc.code()
                    if code == grpc.StatusCode.UNAUTHENTICATED:
                        self.rejoin_after(exc)
                        continue
                    if code == grpc.StatusCode.ALREADY_EXISTS:
                        # One delta per client per base version and round: this one was trained
                        # from a version we already pushed on (e.g. after a relaunch or a re-seed). Like STALE:
                        # drop it, resync to a newer version and retrain.
                        raise StaleDeltaError(exc.details() or "already sent a delta on this base") from None
                    if code == grpc.StatusCode.ABORTED:  # a PS rule refused it (the round share, say): push later
                        raise DeferredDeltaError(exc.details() or "round share spent") from None
                    if code not in RETRYABLE or time.monotonic() - t0 > self.timeouts.retry_s:
                        raise PushError(f"{code.name}: {exc.details()}") from None
                    log.warning("event=push_retry attempt=%d code=%s", attempt, code.name)
                    time.sleep(backoff.next_delay())
                    continue
                self.stream.version_seen = max(self.stream.version_seen, result.version)
                if result.aggregation_mode:  # a PS that predates the field leaves it empty
                    self.aggregation_mode = result.aggregation_mode
                if result.status == pb.STALE:
                    raise StaleDeltaError(result.message)
                size = upload.header.payload_bytes
                self.bytes_sent += size
                self.link.pushed(size, time.monotonic() - t_send, duplicate=result.status == pb.DUPLICATE)
                return PushReceipt(pb.PushStatus.Name(result.status), result.version, result.staleness,
                                   result.weight, size, time.monotonic() - t0, attempt)

    def _set_pending(self, upload: Upload | None) -> None:
        with self.stream.cond:  # the stream thread settles it
            old, self._pending = self._pending, upload
        if old is not None and old is not upload:
            old.spool.close()

    def settle_pending(self, version: int) -> None:
        """A newer version from the same PS instance contains every delta it had accepted."""
        pending = self._pending
        if pending is not None and pending.instance == self.server_instance and version > pending.accepted_at_version:
            self._set_pending(None)

    def _resend_pending(self) -> None:
        """After the PS restarted: push the accepted-but-unapplied delta again (DUPLICATE if it survived)."""
        pending = self._pending
        if pending is None:
            return
        try:
            receipt = self._send(pending)
            log.info("event=pending_resent status=%s version=%d", receipt.status, receipt.version)
            if receipt.status == "ACCEPTED":
                pending.instance, pending.accepted_at_version = self.server_instance, receipt.version
                return
        except (StaleDeltaError, DeferredDeltaError, PushError, JoinError) as exc:
            log.warning("event=pending_dropped reason=%r", str(exc))
        if self._pending is pending:
            self._set_pending(None)

    @staticmethod
    def _messages(header: pb.DeltaHeader, spool, digest: bytes):
        yield pb.DeltaChunk(header=header)
        spool.seek(0)
        offset = 0
        while data := spool.read(PAYLOAD_CHUNK):
            yield pb.DeltaChunk(payload=pb.DeltaPayload(offset=offset, data=data))
            offset += len(data)
        yield pb.DeltaChunk(trailer=pb.DeltaTrailer(sha256=digest))

    @property
    def closed(self) -> bool:
        """`close()` was called: the model stream is stopped and a wait for a model returns at once."""
        return self._stop.is_set()

    def close(self) -> None:
        self._set_pending(None)
        self._stop.set()
        self.stream.close()
        self.channel.close()
        for t in (self.stream.thread, self._heartbeat):
            if t is not None:
                t.join(timeout=5)
