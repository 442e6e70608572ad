"""The client's side of the wire: Join, a resumable StreamModel receiver, idempotent PushDelta, heartbeats.

Only outbound connections (paper §III-B2). A broken model download resumes at the byte it reached;
a failed push is retransmitted with the same upload id, so the PS applies it at most once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import grpc
import numpy as np

from geofed.config import FederationConfig
from geofed.manifest import Manifest
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed.protocol.channel import open_channel
from geofed.protocol.messages import manifest_from_proto, manifest_to_proto, report_to_proto

from .backoff import Backoff
from .model_transfer import ChunkDamaged, ModelAssembler, TransferRestart

log = logging.getLogger("geofed.client")

RTT_WINDOW = 8  # heartbeat round trips the RTT is the least of
PAYLOAD_CHUNK = 1 << 20  # bytes per PushDelta payload message (well under gRPC's 4 MiB default)
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DATA_LOSS,
}


class JoinError(Exception):
    """Could not join: bad/used/expired token or unreachable PS; the message says which."""


class StaleDeltaError(Exception):
    """The PS refused the delta as too stale: fetch the current model and train again."""


class PushError(Exception):
    """The PS refused the push for a reason retrying cannot fix."""


@dataclass
class GlobalVersion:
    """One fully received, checksum-verified global model."""

    version: int
    flat: np.ndarray
    manifest: Manifest
    received_at: float = field(default_factory=time.monotonic)
    seconds: float = 0.0  # wall time of the transfer
    instance: str = ""  # the PS instance that published it (versions never change within one instance)

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes


@dataclass
class Upload:
    """One encoded delta kept (spooled) for retransmission.

    `saved()` and `restored()` carry it across a relaunch: a client preempted mid-push resends the same
    upload id instead of training again, and the PS answers DUPLICATE if it had already taken it.
    """

    header: pb.DeltaHeader
    spool: BinaryIO
    digest: bytes
    instance: str = ""
    accepted_at_version: int = 0

    @property
    def upload_id(self) -> str:
        return self.header.upload_id

    def saved(self) -> tuple[bytes, bytes]:
        """(serialised header, payload) of this upload."""
        self.spool.seek(0)
        return self.header.SerializeToString(), self.spool.read()

    @classmethod
    def restored(cls, header: bytes, payload: bytes) -> Upload:
        """The upload `saved()` described, with its original upload id."""
        head = pb.DeltaHeader.FromString(header)
        if head.payload_bytes != len(payload):
            raise ValueError(f"saved upload holds {len(payload)} payload bytes, its header says {head.payload_bytes}")
        spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115 - owned by the upload
        spool.write(payload)
        return cls(head, spool, hashlib.sha256(payload).digest())


@dataclass
class PushReceipt:
    status: str
    version: int
    staleness: int
    weight: float
    payload_bytes: int
    seconds: float
    attempts: int


def blend(previous: float | None, sample: float) -> float:
    """A measured rate or time, smoothed: the mean of the previous estimate and the new sample."""
    return sample if previous is None else 0.5 * (previous + sample)


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
        self.state_dir = Path(state_dir) if state_dir else None
        self.rpc_timeout_s, self.push_timeout_s, self.join_deadline_s = rpc_timeout_s, push_timeout_s, join_deadline_s
        self.retry_budget_s = retry_budget_s
        self._push_lock = threading.RLock()
        self._pending: Upload | None = None
        self.downlink_decoders: dict = {}  # the paradigm's own downlink encodings; set before start()
        self.session: str | None = None
        self.session_ttl_s = 60.0
        self.federation: FederationConfig | None = None
        self.master = False
        self.server_instance = ""
        self.join_version = 0
        self.manifest: Manifest = ()
        # Declared at Join when known (a relaunch reads them from its checkpoint); the PS refuses a mismatch.
        self.paradigm = ""
        self.declared_manifest: Manifest = ()
        self.group = ""  # multi-PS: the client's group; the PS refuses a client of another group
        # A sharded PS (issue 18): inner shard bounds (frames must end there) and the map's digest, learnt at
        # Join and on every model transfer; a push cut for an older map comes back STALE.
        self.shard_cuts: tuple[int, ...] = ()
        self.shard_map = b""
        self._rejoin_token: str | None = self._load_rejoin()
        self._join_lock = threading.Lock()
        self._latest: GlobalVersion | None = None
        self._held: GlobalVersion | None = None  # kept from before a relaunch, unverified: see `hold`
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.report: dict = {}
        self.bytes_sent = 0
        self.bytes_received = 0
        self.link_bytes_per_s: float | None = None  # measured upload throughput (for codec choice)
        # The aggregation mode the PS said it runs in its last push response ("" until one says): with
        # aggregation.mode 'auto' it changes between rounds, and the client waits the way the PS runs now.
        self.aggregation_mode = ""
        # Measured for the sync-interval tuner (geofed.tuning): download throughput of the model stream, the
        # heartbeat's round trip, and the bytes of the last push and model transfer (what the next will cost).
        self.down_bytes_per_s: float | None = None
        self.rtt_s: float | None = None
        self._rtt_samples: deque[float] = deque(maxlen=RTT_WINDOW)
        self.last_push_bytes: int | None = None
        self.last_model_bytes: int | None = None
        self._first_chunk: tuple[int, float, int] | None = None  # (version, arrival, bytes) of a transfer's start
        # (time, whether the PS was known to hold a version newer than ours) when the model stream was opened: a
        # one-chunk transfer that needed no wait is timed from there (issue 14: at 0.45 M parameters every
        # transfer is one chunk, and the interval tuner never got a download rate).
        self._opened: tuple[float, bool] | None = None
        self.ps_version_seen = 0  # the newest version a Join or push response named
        self.model_resumes = 0
        self._call = None
        # On demand (federation.downlink.prefetch off): the stream is open only while someone waits for a
        # newer model than `_demand` (-1: any other model), so a client receives one difference per sync.
        self.on_demand = False
        self._demand: int | None = 0  # the first model is fetched at start(), while the model is being built

    # ---- Join ---------------------------------------------------------------------------------------

    def _rejoin_path(self) -> Path | None:
        return self.state_dir / "rejoin.token" if self.state_dir else None

    def _load_rejoin(self) -> str | None:
        path = self._rejoin_path()
        if path and path.exists():
            return path.read_text().strip() or None
        return None

    def _save_rejoin(self, token: str) -> None:
        path = self._rejoin_path()
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        os.replace(tmp, path)

    def join(self) -> None:
        """Join with the freshest credential we have: the given token first, then the rejoin token."""
        with self._join_lock:
            errors = []
            backoff = Backoff()
            deadline = time.monotonic() + self.join_deadline_s
            candidates = self._token_candidates()
            while True:
                for source, token in candidates:
                    try:
                        request = pb.JoinRequest(token=token, client_id=self.client_id, paradigm=self.paradigm,
                                                 manifest=manifest_to_proto(self.declared_manifest),
                                                 group=self.group)
                        r = self.stub.Join(request, timeout=self.rpc_timeout_s)
                    except grpc.RpcError as exc:
                        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:  # another paradigm or layout
                            raise JoinError(f"the parameter server refused this client: {exc.details()}") from None
                        if exc.code() in RETRYABLE:
                            errors.append(f"{source}: {exc.code().name}")
                            break  # PS unreachable: back off, then try the same candidates again
                        errors.append(f"{source} token refused ({exc.details()})")
                        continue
                    self._adopt_join(r)
                    log.info("event=joined client=%s via=%s version=%d master=%s", self.client_id, source,
                             r.version, r.master)
                    return
                else:
                    raise JoinError("; ".join(errors) or "no token available (give --token-file or GEOFED_TOKEN)")
                if time.monotonic() > deadline:
                    raise JoinError(f"parameter server {self.address} unreachable: " + "; ".join(errors[-3:]))
                time.sleep(backoff.next_delay())

    def _token_candidates(self) -> list[tuple[str, str]]:
        out = []
        try:
            token = self.token_source()
        except (OSError, KeyError, ValueError) as exc:
            log.warning("event=token_unavailable error=%r", str(exc))
            token = ""
        if token:
            out.append(("one-time", token))
        if self._rejoin_token:
            out.append(("rejoin", self._rejoin_token))
        return out

    def _adopt_join(self, r: pb.JoinResponse) -> None:
        restarted = bool(self.server_instance) and r.server_instance != self.server_instance
        self.session = r.session
        self.session_ttl_s = r.session_ttl_s
        self.federation = FederationConfig.model_validate_json(r.federation_json)
        self.on_demand = not self.federation.downlink.prefetch
        self.master = r.master
        self.server_instance = r.server_instance
        self.join_version = r.version
        self.ps_version_seen = max(self.ps_version_seen, r.version)
        self.manifest = manifest_from_proto(r.manifest)
        self._learn_shard_map(r)
        self._rejoin_token = r.rejoin_token
        self._save_rejoin(r.rejoin_token)
        if restarted:
            # The PS came back from a checkpoint: our model may be newer than its version, so take
            # whatever it streams next, and resend a delta it had accepted but perhaps not applied.
            log.info("event=ps_restarted version=%d pending=%s", r.version, self._pending is not None)
            with self._cond:
                self._latest = None
            if self._pending is not None:
                threading.Thread(target=self._resend_pending, name="geofed-resend", daemon=True).start()

    def _metadata(self):
        if self.session is None:
            raise JoinError("not joined")
        return bearer(self.session)

    def _rejoin_after(self, exc: grpc.RpcError) -> None:
        log.warning("event=session_refused client=%s detail=%r", self.client_id, exc.details())
        self.join()

    # ---- background: model stream + heartbeat ------------------------------------------------------

    def start(self) -> None:
        """Open the long-lived model stream and the heartbeat loop."""
        for target, name in ((self._stream_loop, "model-stream"), (self._heartbeat_loop, "heartbeat")):
            t = threading.Thread(target=target, name=f"geofed-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def latest(self) -> GlobalVersion | None:
        return self._latest

    def hold(self, kept: GlobalVersion) -> str:
        """Before `start()`: a global model kept from before a relaunch (the client checkpoint's exact base).

        'adopted': the PS instance that published it is still up and at that version (versions never change
        within one instance), so it is the model, and nothing is fetched. 'difference': the PS is newer, so
        the first transfer is the difference from it; the result is checked against the PS's sha256 and a
        mismatch drops it for a whole-model transfer. 'dropped': anything else (the PS restarted and may have
        republished that version number differently, or is behind it).
        """
        if kept.version == self.join_version and kept.instance and kept.instance == self.server_instance:
            with self._cond:
                self._latest, self._demand = kept, None
            return "adopted"
        if 0 < kept.version < self.join_version:
            self._held = kept
            return "difference"
        return "dropped"

    def wait_for_fresh(self, than: GlobalVersion | None, timeout: float | None = None) -> GlobalVersion | None:
        """Block until a model other than `than` has been received (any version: used after a resync)."""
        with self._cond:
            if self._latest is than or self._latest is None:  # None: a PS restart dropped what we held
                self._demand = -1
                self._cond.notify_all()
            self._cond.wait_for(
                lambda: self._stop.is_set() or (self._latest is not None and self._latest is not than), timeout
            )
            latest = self._latest
        return latest if latest is not None and latest is not than else None

    def wait_for_version(self, newer_than: int, timeout: float | None = None) -> GlobalVersion | None:
        """Block until a global version > `newer_than` has been fully received."""
        with self._cond:
            if self._demand != -1 and (self._latest is None or self._latest.version <= newer_than):
                self._demand = max(self._demand or 0, newer_than)
                self._cond.notify_all()
            self._cond.wait_for(
                lambda: self._stop.is_set() or (self._latest is not None and self._latest.version > newer_than),
                timeout,
            )
            latest = self._latest
        return latest if latest is not None and latest.version > newer_than else None

    def _stream_loop(self) -> None:
        backoff = Backoff()
        assembler = ModelAssembler(self.downlink_decoders)
        while not self._stop.is_set():
            if self.on_demand:
                with self._cond:  # nothing to fetch until someone waits for a model
                    self._cond.wait_for(lambda: self._stop.is_set() or self._demand is not None, 1.0)
                    if self._demand is None:
                        continue
            base = self._latest or self._held
            have = base.version if base else 0
            req = pb.StreamModelRequest(have_version=have, one_transfer=self.on_demand)
            resume = assembler.resume_point()
            if resume is not None:
                req.resume_version, req.resume_offset = resume
                self.model_resumes += 1
            call = None
            try:
                self._opened = (time.monotonic(), self.ps_version_seen > have)
                call = self.stub.StreamModel(req, metadata=self._metadata())
                self._call = call
                for chunk in call:
                    if self._stop.is_set():
                        break
                    got = self._take_chunk(assembler, chunk)
                    backoff.reset()
                    if got and self.on_demand and self._demand is None:
                        call.cancel()  # the waiter has its model; reopen at the next demand
                        break
            except (ChunkDamaged, TransferRestart) as exc:
                # Reopen the stream: at the offset reached (a damaged chunk), or from the start.
                if isinstance(exc, TransferRestart):
                    assembler.reset()
                    if self._latest is None and self._held is not None:  # it was not the PS's version after all
                        log.warning("event=held_model_dropped version=%d", self._held.version)
                        self._held = None
                log.warning("event=model_chunk_refetch reason=%r", str(exc))
                if call is not None:
                    call.cancel()
                time.sleep(backoff.next_delay())
            except grpc.RpcError as exc:
                if self._stop.is_set():
                    return
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    try:
                        self._rejoin_after(exc)
                    except JoinError as err:
                        log.error("event=rejoin_failed error=%r", str(err))
                        time.sleep(backoff.next_delay())
                    continue
                if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    assembler.reset()  # our resume point is unusable: start the transfer over
                resume = assembler.resume_point()
                log.warning("event=stream_broken code=%s resume_bytes=%d", exc.code().name, resume[1] if resume else 0)
                time.sleep(backoff.next_delay())
            except JoinError:
                time.sleep(backoff.next_delay())
            except Exception as exc:  # noqa: BLE001 - a dead stream thread would leave the agent waiting forever
                if self._stop.is_set():
                    return
                log.error("event=model_stream_error error=%r", f"{type(exc).__name__}: {exc}")
                assembler.reset()  # start the transfer over: the failure may lie in what was assembled
                if call is not None:
                    call.cancel()
                time.sleep(backoff.next_delay())

    def _learn_shard_map(self, msg: pb.JoinResponse | pb.ModelChunk) -> None:
        if msg.shard_map:
            self.shard_cuts, self.shard_map = tuple(msg.shard_bounds)[1:-1], msg.shard_map

    def _take_chunk(self, assembler: ModelAssembler, chunk: pb.ModelChunk) -> bool:
        """Feed one chunk to the assembler; publish the vector when a transfer completes and verifies (True)."""
        self._learn_shard_map(chunk)
        self.bytes_received += len(chunk.data)
        if chunk.offset == 0:
            self._first_chunk = (chunk.version, time.monotonic(), len(chunk.data))
        held = self._latest or self._held
        got = assembler.take(chunk, (held.version, held.flat) if held is not None else None)
        if got is None:
            return False
        self._held = None
        self._time_download(got.version, got.nbytes)
        gv = GlobalVersion(got.version, got.flat, got.manifest or self.manifest, seconds=got.seconds,
                           instance=self.server_instance)
        if got.manifest:
            self.manifest = got.manifest
        with self._cond:
            self._latest = gv
            if self._demand is not None and (self._demand == -1 or gv.version > self._demand):
                self._demand = None
            self._cond.notify_all()
        self._settle_pending(got.version)
        log.info("event=model_received version=%d encoding=%s bytes=%d seconds=%.2f", got.version, got.encoding,
                 got.nbytes, got.seconds)
        return True

    def _time_download(self, version: int, nbytes: int) -> None:
        """Download rate of a finished transfer: the bytes after its first chunk over the time since it arrived.

        The first chunk's own time is unknown (it includes the PS's wait for the version and its encoding), so
        it is left out; a small transfer says too little about the link and is not counted.

        A one-chunk transfer is timed from the stream's opening instead, less one RTT (request and first
        byte), when the PS was known then to hold a version newer than the client's (a push response or the
        Join named it), so the PS sent at once and no round wait is in it; the PS's encoding time still
        counts, so the rate errs low. Only the stream's first transfer qualifies.
        """
        self.last_model_bytes = nbytes
        first, opened = self._first_chunk, self._opened
        self._first_chunk = self._opened = None
        if first is None or first[0] != version:
            return
        now = time.monotonic()
        rest, elapsed = nbytes - first[2], now - first[1]
        if rest > (256 << 10) and elapsed > 0:
            self.down_bytes_per_s = blend(self.down_bytes_per_s, rest / elapsed)
        elif rest == 0 and opened is not None and opened[1] and self.rtt_s is not None \
                and nbytes > (256 << 10):
            transfer = now - opened[0] - self.rtt_s
            if transfer > 0:
                self.down_bytes_per_s = blend(self.down_bytes_per_s, nbytes / transfer)

    def _heartbeat_interval(self) -> float:
        """A third of the session's life; every 2 s while an ACCEPTED delta waits to be folded in.

        With on-demand model fetches no stream breaks when the PS restarts, so the heartbeat is what notices
        the new instance (UNAUTHENTICATED → re-join → resend of the buffered delta): it must not take minutes.
        """
        period = max(1.0, self.session_ttl_s / 3)
        return min(period, 2.0) if self._pending is not None else min(period, 15.0)

    def _note_rtt(self, sample: float) -> None:
        """The RTT is the least of the last RTT_WINDOW heartbeat round trips (a windowed minimum, as TCP and
        BBR keep theirs): a heartbeat caught in a link stall or black hole (3.5 s on hetero-wan's 15 s
        outage) is no round trip, and a mean with it once set a client's tuned interval to 64 s."""
        self._rtt_samples.append(sample)
        self.rtt_s = min(self._rtt_samples)

    def _heartbeat_loop(self) -> None:
        last = time.monotonic()
        # Tick every second and compare with the interval *now*: a delta buffered mid-wait shortens it at once.
        while not self._stop.wait(1.0):
            if time.monotonic() - last < self._heartbeat_interval():
                continue
            last = time.monotonic()
            try:
                t_call = time.monotonic()
                self.stub.Heartbeat(pb.HeartbeatRequest(report=report_to_proto(self.report)),
                                    metadata=self._metadata(), timeout=self.rpc_timeout_s)
                # A small unary RPC: its wall time is the round trip (plus the PS's bookkeeping, negligible).
                self._note_rtt(time.monotonic() - t_call)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    try:
                        self._rejoin_after(exc)
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
        """PushDelta with retransmission until `retry_budget_s` runs out (the upload id keeps it idempotent)."""
        backoff = Backoff(cap_s=10.0)
        t0 = time.monotonic()
        attempt = 0
        with self._push_lock:
            while True:
                attempt += 1
                try:
                    t_send = time.monotonic()
                    result = self.stub.PushDelta(self._messages(upload.header, upload.spool, upload.digest),
                                                 metadata=self._metadata(), timeout=self.push_timeout_s)
                except grpc.RpcError as exc:
                    code = exc.code()
                    if code == grpc.StatusCode.UNAUTHENTICATED:
                        self._rejoin_after(exc)
                        continue
                    if code == grpc.StatusCode.ALREADY_EXISTS:
                        # One delta per client per base version and round (issue 10): this one was trained
                        # from a version we already pushed on (e.g. after a relaunch or a re-seed). Like STALE:
                        # drop it, resync to a newer version and retrain.
                        raise StaleDeltaError(exc.details() or "already sent a delta on this base") from None
                    if code not in RETRYABLE or time.monotonic() - t0 > self.retry_budget_s:
                        raise PushError(f"{code.name}: {exc.details()}") from None
                    log.warning("event=push_retry attempt=%d code=%s", attempt, code.name)
                    time.sleep(backoff.next_delay())
                    continue
                self.ps_version_seen = max(self.ps_version_seen, result.version)
                if result.aggregation_mode:  # a PS that predates the field leaves it empty
                    self.aggregation_mode = result.aggregation_mode
                if result.status == pb.STALE:
                    raise StaleDeltaError(result.message)
                size = upload.header.payload_bytes
                elapsed = time.monotonic() - t_send
                self.bytes_sent += size
                self.last_push_bytes = size
                # A DUPLICATE is answered right after the header, before the payload crosses the link: its
                # size over its time is no upload rate (it would inflate what autotune plans with).
                if result.status != pb.DUPLICATE and size > (256 << 10) and elapsed > 0:
                    self.link_bytes_per_s = blend(self.link_bytes_per_s, size / elapsed)
                return PushReceipt(pb.PushStatus.Name(result.status), result.version, result.staleness,
                                   result.weight, size, time.monotonic() - t0, attempt)

    def _set_pending(self, upload: Upload | None) -> None:
        with self._cond:
            old, self._pending = self._pending, upload
        if old is not None and old is not upload:
            old.spool.close()

    def _settle_pending(self, version: int) -> None:
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
        except (StaleDeltaError, PushError, JoinError) as exc:
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

    def close(self) -> None:
        self._set_pending(None)
        self._stop.set()
        if self._call is not None:
            self._call.cancel()
        with self._cond:
            self._cond.notify_all()
        self.channel.close()
        for t in self._threads:
            t.join(timeout=5)
