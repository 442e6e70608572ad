"""gRPC adapters: protobuf in, one call into `ParameterServerCore`, protobuf or a status code out."""

from __future__ import annotations

import hashlib
import logging
import time
import zlib

import grpc

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import credential_from
from geofed.protocol.messages import manifest_from_proto, manifest_to_proto, report_from_proto, report_to_proto

from .aggregation.downlink import Downlink
from .core import ParameterServerCore
from .errors import (
    AlreadySent,
    CorruptPayload,
    DeltaRefused,
    InvalidPush,
    NotPermitted,
    NotReady,
    ParadigmMismatch,
    PushRejected,
    PushTooLarge,
    StaleDelta,
    Unavailable,
)
from .ingest import PushHeader
from .log_limits import BoundedLog
from .ratelimit import RateLimiter
from .registry import AuthError, Session, SiteExists
from .status_page.view import client_rows, wire_fields
from .stream_slots import StreamCapExceeded, StreamSlot

log = logging.getLogger("geofed.ps")

# Domain refusals -> gRPC status codes: the only place the core's errors meet the wire's.
_CODES: dict[type[PushRejected], grpc.StatusCode] = {
    InvalidPush: grpc.StatusCode.INVALID_ARGUMENT,
    PushTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    CorruptPayload: grpc.StatusCode.DATA_LOSS,
    NotPermitted: grpc.StatusCode.PERMISSION_DENIED,
    NotReady: grpc.StatusCode.FAILED_PRECONDITION,
    AlreadySent: grpc.StatusCode.ALREADY_EXISTS,
    DeltaRefused: grpc.StatusCode.ABORTED,  # a PS rule refused it (the round share, say): push a newer one later
    StaleDelta: grpc.StatusCode.FAILED_PRECONDITION,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
}
_STATUS = {"ACCEPTED": pb.ACCEPTED, "APPLIED": pb.APPLIED, "DUPLICATE": pb.DUPLICATE, "STALE": pb.STALE}


def status_code(err: PushRejected) -> grpc.StatusCode:
    for cls in type(err).__mro__:
        if cls in _CODES:
            return _CODES[cls]
    return grpc.StatusCode.INVALID_ARGUMENT


def model_chunks(down: Downlink, start: int, chunk_bytes: int):
    """Yield a downlink's bytes from `start` as ModelChunks (manifest first, digest last, CRC-32 on each)."""
    view = down.data
    total = len(view)
    offset = start
    first = True
    while True:
        end = min(total, offset + chunk_bytes)
        data = bytes(view[offset:end])
        chunk = pb.ModelChunk(version=down.version, offset=offset, total_bytes=total, data=data,
                              encoding=down.encoding, base_version=down.base_version, crc32=zlib.crc32(data))
        if first:
            chunk.manifest.extend(manifest_to_proto(down.manifest))
            first = False
        if end == total:
            chunk.sha256 = down.sha256
        yield chunk
        offset = end
        if offset >= total:
            return


def header_from_proto(h: pb.DeltaHeader) -> PushHeader:
    return PushHeader(
        base_version=h.base_version, upload_id=h.upload_id, codec_header=h.codec_header,
        payload_bytes=h.payload_bytes, num_tokens=h.num_tokens, num_samples=h.num_samples,
        local_steps=max(1, h.local_steps), init=h.init,
        manifest=manifest_from_proto(h.manifest),
        report=report_from_proto(h.report) if h.HasField("report") else {}, shard_map=h.shard_map,
    )


class ParameterServerServicer(pb_grpc.ParameterServerServicer):
    """Client-facing RPCs."""

    def __init__(self, core: ParameterServerCore) -> None:
        self.core = core
        rate = core.server.rate_limit_per_s
        self.limiter = RateLimiter(rate)
        self.join_limiter = RateLimiter(rate / 4)
        self.refusals = BoundedLog(log)  # refused credentials: every one counted, lines at a bounded rate

    def _session(self, context: grpc.ServicerContext, rpc: str) -> tuple[Session, str]:
        credential = credential_from(context.invocation_metadata(), "Bearer")
        if credential is None:
            self.core.metrics.auth_failures.labels(rpc).inc()
            self.refusals.warning(rpc, "event=auth_refused rpc=%s peer=%r reason=%r", rpc, context.peer(),
                                  "missing session")
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing session: call Join first")
        try:
            session = self.core.authenticate(credential, rpc, context.peer())
        except AuthError as exc:
            self.refusals.warning(rpc, "event=auth_refused rpc=%s peer=%r reason=%r", rpc, context.peer(), str(exc))
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        if not self.limiter.allow(self.core.unit_of(session.client_id)):  # a site's client ids share its rate
            self.core.metrics.rate_limited.labels(rpc).inc()
            if rpc == "PushDelta":
                self.core.reject(PushTooLarge("rate_limit", "rate limit exceeded"), session.client_id)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rate limit exceeded: slow down")
        return session, credential

    def Join(self, request: pb.JoinRequest, context: grpc.ServicerContext) -> pb.JoinResponse:
        if not self.join_limiter.allow(context.peer().rsplit(":", 1)[0]):
            self.core.metrics.rate_limited.labels("Join").inc()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many Join attempts: slow down")
        try:
            declared = {"paradigm": request.paradigm, "manifest": manifest_from_proto(request.manifest),
                        "group": request.group, "paradigm_json": request.paradigm_json,
                        "frozen_digest": request.frozen_digest,
                        "tokenizer": (request.tokenizer, request.tokenizer_sha256)}
            if request.preview:
                result = self.core.preview(request.token, request.client_id, **declared)
            else:
                result = self.core.join(request.token, request.client_id, context.peer(), **declared)
        except ParadigmMismatch as exc:
            log.warning("event=join_refused client=%r reason=%r", request.client_id[:64], str(exc))
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except AuthError as exc:
            self.core.metrics.auth_failures.labels("Join").inc()
            # %r: a client-chosen id must not be able to write lines into the log.
            self.refusals.warning("Join", "event=join_refused client=%r reason=%r", request.client_id[:64], str(exc))
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        response = pb.JoinResponse(
            session=result.session, session_ttl_s=result.session_ttl_s, federation_json=self.core.fed.model_dump_json(),
            version=result.version, master=result.master, server_instance=self.core.instance,
            rejoin_token=result.rejoin_token, rejoin_expires_at=result.rejoin_expires_at,
            frozen_digest=result.frozen_digest, run_started_at=result.run_started_at,
            master_client_id=self.core.server.master_client_id or "",
            tokenizer=result.tokenizer[0], tokenizer_sha256=result.tokenizer[1],
        )
        if result.snapshot is not None:
            response.manifest.extend(manifest_to_proto(result.snapshot.manifest))
        return response

    def _slot(self, session: Session, credential: str, context: grpc.ServicerContext, rpc: str) -> StreamSlot:
        """A stream slot for this long-lived call, or abort RESOURCE_EXHAUSTED naming the cap (stream_slots).
        It is freed as soon as the call ends (a cancelled stream's handler may notice only on its next wake-up)."""
        key = hashlib.sha256(credential.encode()).hexdigest()
        try:
            slot = self.core.streams.acquire(key, self.core.unit_of(session.client_id))
        except StreamCapExceeded as exc:
            self.core.stream_refused(exc, session.client_id, rpc)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message)
        context.add_callback(lambda: self.core.streams.release(slot))
        return slot

    def StreamModel(self, request: pb.StreamModelRequest, context: grpc.ServicerContext):
        session, credential = self._session(context, "StreamModel")
        slot = self._slot(session, credential, context, "StreamModel")
        client = self.core.stream_opened(session)
        have = request.have_version
        try:
            while context.is_active():
                snap = self.core.model.wait_newer(have, timeout=1.0)
                if snap is None:
                    if self.core.model.closed:
                        context.abort(grpc.StatusCode.UNAVAILABLE, "parameter server shutting down")
                    try:  # a revoked or expired session ends the stream
                        self.core.registry.session(credential, context.peer())
                    except AuthError as exc:
                        context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
                    continue
                held = client.manifest_held == tuple(snap.manifest)
                for chunk in self._transfer(snap, have, request, context):
                    if not context.is_active():
                        return
                    if held:  # sent once per session (Join, or a whole transfer), not with every version
                        chunk.ClearField("manifest")
                    client.bytes_out += len(chunk.data)
                    self.core.metrics.bytes_out.labels(client.client_id).inc(len(chunk.data))
                    yield chunk
                client.manifest_held = tuple(snap.manifest)
                if request.one_transfer:  # an on-demand client: nothing more until it asks again
                    return
                have = snap.version
        finally:
            self.core.stream_closed(client)
            self.core.streams.release(slot)

    def _transfer(self, snap, have: int, request: pb.StreamModelRequest, context: grpc.ServicerContext):
        """The chunks that take a client holding `have` to `snap` (from its resume offset when it resumes it)."""
        down = self.core.aggregator.downlink(snap, have)
        start = 0
        if request.resume_version == snap.version and request.resume_offset:
            if request.resume_offset >= down.nbytes:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "resume_offset outside the model transfer")
            start = request.resume_offset
        return model_chunks(down, start, self.core.server.chunk_bytes)

    def PushDelta(self, request_iterator, context: grpc.ServicerContext) -> pb.PushResult:
        session, credential = self._session(context, "PushDelta")
        slot = self._slot(session, credential, context, "PushDelta")
        try:
            return self._push(session, request_iterator, context)
        finally:
            self.core.streams.release(slot)

    def _push(self, session: Session, request_iterator, context: grpc.ServicerContext) -> pb.PushResult:
        client = self.core._client(session)
        t0 = time.perf_counter()
        receiver = None
        try:
            first = next(request_iterator, None)
            if first is None or first.WhichOneof("part") != "header":
                raise InvalidPush("protocol", "the first message of a push must be its header")
            receiver, done = self.core.begin_push(session, header_from_proto(first.header))
            if done is not None:
                return pb.PushResult(status=_STATUS[done.status], version=done.version, staleness=done.staleness,
                                     weight=done.weight, message=done.message,
                                     aggregation_mode=self.core.aggregator.mode)
            push = None
            decode_s = 0.0
            for msg in request_iterator:
                part = msg.WhichOneof("part")
                if part == "payload":
                    client.bytes_in += len(msg.payload.data)
                    client.payload_at = time.time()  # an upload moving is progress (ps_server.waiting)
                    self.core.metrics.bytes_in.labels(client.client_id).inc(len(msg.payload.data))
                    t = time.perf_counter()
                    receiver.on_payload(msg.payload.offset, msg.payload.data)
                    decode_s += time.perf_counter() - t
                elif part == "trailer":
                    push = receiver.on_trailer(msg.trailer.sha256)
                    break
                else:
                    raise InvalidPush("protocol", "a second header arrived in one push")
            if push is None:
                raise InvalidPush("truncated",
                    f"stream ended before the trailer ({receiver.received} of {receiver.header.payload_bytes} bytes)",
                )
            self.core.metrics.decode_seconds.observe(decode_s)
            outcome = self.core.complete_push(session, push)
            self.core.metrics.push_seconds.labels(client.client_id).observe(time.perf_counter() - t0)
            return pb.PushResult(status=_STATUS[outcome.status], version=outcome.version, staleness=outcome.staleness,
                                 weight=outcome.weight, message=outcome.message,
                                 aggregation_mode=self.core.aggregator.mode)  # clients wait the way it runs now
        except PushRejected as err:
            if receiver is not None:
                receiver.abort()
            self.core.reject(err, session.client_id)
            context.abort(status_code(err), err.message)

    def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.ServicerContext) -> pb.HeartbeatResponse:
        _, credential = self._session(context, "Heartbeat")
        try:
            self.core.heartbeat(credential, report_from_proto(request.report), context.peer())
        except AuthError as exc:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        return pb.HeartbeatResponse(session_ttl_s=self.core.registry.session_ttl_s, version=self.core.model.version)


class AdminServicer(pb_grpc.AdminServicer):
    """Operator-facing RPCs; a site credential may only mint tokens for its own clients."""

    def __init__(self, core: ParameterServerCore) -> None:
        self.core = core
        # Per caller address, before the credential is checked: throttles credential guessing and a flood
        # from one operator or site alike (burst 2x).
        self.limiter = RateLimiter(core.server.rate_limit_per_s)

    def _principal(self, context: grpc.ServicerContext):
        if not self.limiter.allow(context.peer().rsplit(":", 1)[0]):
            self.core.metrics.rate_limited.labels("admin").inc()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many admin calls: slow down")
        credential = credential_from(context.invocation_metadata(), "Admin")
        if credential is None:
            self.core.metrics.auth_failures.labels("admin").inc()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing admin credential")
        try:
            return self.core.admin_principal(credential)
        except AuthError as exc:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))

    def _guard(self, context, fn):
        try:
            return fn()
        except AuthError as exc:
            code = grpc.StatusCode.PERMISSION_DENIED if exc.permission else grpc.StatusCode.UNAUTHENTICATED
            context.abort(code, str(exc))
        except SiteExists as exc:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(exc))
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    def CreateToken(self, request: pb.CreateTokenRequest, context) -> pb.CreateTokenResponse:
        principal = self._principal(context)
        ttl = request.ttl_s or self.core.server.token_ttl_s
        token, expires = self._guard(
            context,
            lambda: self.core.mint_token(principal, request.client_id, request.site, ttl, request.master),
        )
        log.info("event=token_minted client=%r site=%r by=%r", request.client_id, request.site,
                 principal.site or "admin")
        return pb.CreateTokenResponse(token=token, expires_at=expires)

    def CreateSiteCredential(self, request: pb.SiteRequest, context) -> pb.SiteCredentialResponse:
        principal = self._principal(context)
        credential = self._guard(
            context,
            lambda: self.core.create_site(principal, request.site, request.max_client_ids, rotate=request.rotate),
        )
        log.info("event=site_enrolled site=%r max_client_ids=%d rotated=%s", request.site,
                 self.core.registry.site_quota(request.site), request.rotate)
        return pb.SiteCredentialResponse(credential=credential)

    def RevokeSite(self, request: pb.SiteRequest, context) -> pb.RevokeSiteResponse:
        principal = self._principal(context)
        revoked = self._guard(context, lambda: self.core.revoke_site(principal, request.site))
        log.info("event=site_revoked site=%r existed=%s", request.site, revoked)
        return pb.RevokeSiteResponse(revoked=revoked)

    def RevokeClient(self, request: pb.RevokeClientRequest, context) -> pb.RevokeClientResponse:
        principal = self._principal(context)
        tokens, sessions = self._guard(
            context, lambda: self.core.revoke_client(principal, request.client_id, request.token))
        log.info("event=client_revoked client=%r tokens=%d sessions=%d by=%r", request.client_id, tokens, sessions,
                 principal.site or "admin")
        return pb.RevokeClientResponse(tokens=tokens, sessions=sessions)

    def ListClients(self, request, context) -> pb.ListClientsResponse:
        principal = self._principal(context)
        clients = [c for c in self.core.client_list() if principal.is_admin or c["site"] == principal.site]
        rows = {row["client_id"]: row for row in client_rows(self.core, principal.site)}  # contribution accounting
        response = pb.ListClientsResponse()
        for c in clients:
            info = response.clients.add(
                client_id=c["client_id"], site=c["site"], connected=c["connected"], last_seen=c["last_seen"],
                pushes=c["pushes"], bytes_in=c["bytes_in"], bytes_out=c["bytes_out"], contribution=c["contribution"],
                **wire_fields(rows.get(c["client_id"])),
            )
            info.report.CopyFrom(report_to_proto(c["report"]))
        return response

    def GetStatus(self, request, context) -> pb.StatusResponse:
        self._principal(context)
        return pb.StatusResponse(**self.core.status())
