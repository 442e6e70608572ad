"""The front <-> shard wire of a sharded PS: the `PsShard` servicer, `GrpcLink` (the front's side) and `serve_shard`.

Authentication is the PS-group peer scheme (`ps_server.peers`): `authorization: Peer <secret>` compared
in constant time, and the federation's name on every call. A shard's refusal travels as FAILED_PRECONDITION
with details "<reason>: <message>", so the front gets the same `ShardRefused` the in-process link raises;
a shard that cannot be reached becomes `ShardUnavailable`.
"""

from __future__ import annotations

import hmac
import logging
import queue
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health_pb2

from geofed.config import FederationConfig, ServerConfig
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import AUTH_KEY, credential_from
from geofed.protocol.channel import open_channel
from geofed.protocol.messages import manifest_from_proto, manifest_to_proto
from geofed.stop_signals import wait_for_stop_signal

from ..listen import SERVER_OPTIONS, listen
from .errors import ShardRefused, ShardUnavailable
from .link import StagedSlice
from .shard import ShardCore

log = logging.getLogger("geofed.ps.shard")

_CHUNK = 2 << 20
# The PS's own server options (it accepts the keepalive pings every geofed channel sends; without that a long
# Stage or ReadSlice call is cut with "too_many_pings"), with room for a whole fp32 frame per message.
_SERVER_OPTIONS = (*(o for o in SERVER_OPTIONS if o[0] != "grpc.max_receive_message_length"),
                   ("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20))
_QUEUE = 32  # frames in flight to one shard per push: backpressure instead of buffering a whole push
_CALL_S = 600.0


def default_shard_address(federation: str, index: int) -> str:
    """Where the front finds shard `index` when no address is given (the operator's Service name)."""
    return f"{federation}-ps-shard-{index}:7443"


def shard_addresses(fed: FederationConfig, cfg: ServerConfig) -> list[str]:
    if cfg.shard_addresses:
        out = [a.strip() for a in cfg.shard_addresses.split(",") if a.strip()]
        if len(out) != fed.ps_shards:
            raise ValueError(f"--shard-addresses names {len(out)} shards but the federation has ps_shards="
                             f"{fed.ps_shards}")
        return out
    return [default_shard_address(fed.name, i) for i in range(fed.ps_shards)]


def _state(core: ShardCore, **extra) -> pb.ShardState:
    s = core.state()
    return pb.ShardState(index=s["index"], version=s["version"], prepared=s["prepared"], lo=s["lo"], hi=s["hi"],
                         instance=s["instance"], folded=s["folded"], sha256=s["sha256"], **extra)


class ShardServicer(pb_grpc.PsShardServicer):
    """One shard's RPCs: authenticate, check the federation, one call into `ShardCore`."""

    def __init__(self, core: ShardCore, secret: str) -> None:
        self.core, self.secret = core, secret

    def _check(self, context, federation: str) -> None:
        given = credential_from(context.invocation_metadata(), "Peer") or ""
        if not hmac.compare_digest(given.encode(), self.secret.encode()):
            log.warning("event=shard_call_refused reason=credentials peer=%s", context.peer())
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong PS peer credentials")
        if federation != self.core.fed.name:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"federation: this PS shard belongs to federation {self.core.fed.name!r}, not "
                          f"{federation!r}")

    def _run(self, context, fn):
        try:
            return fn()
        except ShardRefused as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{exc.reason}: {exc.message}")

    def Describe(self, request, context):
        self._check(context, request.federation)
        return _state(self.core)

    def Stage(self, request_iterator, context):
        first = next(request_iterator, None)
        if first is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "frame: an empty stage stream")
        self._check(context, first.federation)
        frames = (m.frame for m in request_iterator)
        staged = self._run(context, lambda: self.core.stage(first.push_id, first.codec_header, frames,
                                                            init=first.init, lo=first.lo, hi=first.hi))
        sketch = staged.sketch.tolist() if staged.sketch is not None else []
        return pb.ShardStageReply(sq_norm=staged.sq_norm, numel=first.hi - first.lo, sketch=sketch)

    def Fold(self, r, context):
        self._check(context, r.federation)
        weight = self._run(context, lambda: self.core.fold(
            r.push_id, r.client_id, r.round, scale=r.scale, norm=r.norm, staleness=r.staleness, factor=r.factor,
            num_tokens=r.num_tokens, local_steps=r.local_steps, position=r.position))
        return pb.ShardFoldReply(weight=weight)

    def Drop(self, r, context):
        self._check(context, r.federation)
        self.core.drop(list(r.push_ids))
        return _state(self.core)

    def Install(self, r, context):
        self._check(context, r.federation)
        self._run(context, lambda: self.core.install(r.push_ids[0] if r.push_ids else "", r.version,
                                                     manifest_from_proto(r.manifest)))
        return _state(self.core)

    def Prepare(self, r, context):
        self._check(context, r.federation)
        ok, why, sq = self._run(context, lambda: self.core.prepare(r.version, r.folded))
        return _state(self.core, ok=ok, message=why, sq_norm=sq)

    def Commit(self, r, context):
        self._check(context, r.federation)
        self._run(context, lambda: self.core.commit(r.version))
        return _state(self.core)

    def Abort(self, r, context):
        self._check(context, r.federation)
        self.core.abort(r.version)
        return _state(self.core)

    def Sync(self, r, context):
        self._check(context, r.federation)
        self._run(context, lambda: self.core.sync(r.version, list(r.push_ids), list(r.keep) if r.keep_only else None))
        return _state(self.core)

    def ReadSlice(self, r, context):
        self._check(context, r.federation)
        snap = self._run(context, lambda: self.core.read(r.version))
        view = memoryview(snap.flat.reshape(-1).view("B"))
        for at in range(r.offset, len(view), _CHUNK):
            if not context.is_active():
                return
            yield pb.ShardSliceChunk(offset=at, total_bytes=len(view), data=bytes(view[at : at + _CHUNK]))


def _refusal(index: int, exc: grpc.RpcError) -> Exception:
    code = exc.code()
    details = exc.details() or ""
    if code == grpc.StatusCode.FAILED_PRECONDITION and ": " in details:
        reason, message = details.split(": ", 1)
        return ShardRefused(reason, message)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return ShardRefused("credentials", f"PS shard {index} refused the front: {details}")
    return ShardUnavailable("shard_down", f"PS shard {index} is unreachable ({code.name}: {details})")


class _GrpcStage:
    """A Stage call fed frame by frame from the front's push handler (bounded queue: backpressure)."""

    _END = object()

    def __init__(self, link: GrpcLink, i: int, first: pb.ShardStageChunk) -> None:
        self.i, self.q = i, queue.Queue(maxsize=_QUEUE)

        def requests():
            yield first
            while (item := self.q.get()) is not self._END:
                yield pb.ShardStageChunk(frame=item)

        self.future = link.stubs[i].Stage.future(requests(), metadata=link.metadata, timeout=_CALL_S)

    def _put(self, item) -> bool:
        """Queue `item` unless the call has ended (refused or gone); waits while the shard catches up."""
        while True:
            try:
                self.q.put(item, timeout=1.0)
                return True
            except queue.Full:
                if self.future.done():
                    return False

    def send(self, frame: bytes) -> None:
        if not self._put(frame):  # the shard ended the call early: its error says why
            self.finish()
            raise ShardUnavailable("shard_down", f"PS shard {self.i} ended the push early")

    def finish(self) -> StagedSlice:
        self._put(self._END)  # never dropped while the call lives: the shard waits for the end of its frames
        try:
            reply = self.future.result()
        except grpc.RpcError as exc:
            raise _refusal(self.i, exc) from None
        return StagedSlice(reply.sq_norm, np.asarray(reply.sketch, dtype=np.float64) if reply.sketch else None)

    def cancel(self) -> None:
        self.future.cancel()


class GrpcLink:
    """The front's `ShardLink` over gRPC."""

    def __init__(self, fed: FederationConfig, cfg: ServerConfig, secret: str) -> None:
        self.fed = fed
        self.addresses = shard_addresses(fed, cfg)
        self.shards = len(self.addresses)
        ca = Path(cfg.peer_ca).read_bytes() if cfg.peer_ca else None
        self.metadata = ((AUTH_KEY, f"Peer {secret}"),)
        self.stubs = []
        for a in self.addresses:
            channel = open_channel(a, insecure=cfg.insecure, ca_cert=ca)
            self.stubs.append(pb_grpc.PsShardStub(channel))

    def address(self, i: int) -> str:
        return self.addresses[i]

    def _unary(self, i: int, rpc: str, timeout: float = _CALL_S, **fields):
        try:
            return getattr(self.stubs[i], rpc)(pb.ShardRequest(federation=self.fed.name, **fields),
                                                metadata=self.metadata, timeout=timeout)
        except grpc.RpcError as exc:
            raise _refusal(i, exc) from None

    @staticmethod
    def _dict(s: pb.ShardState) -> dict:
        return {"index": s.index, "version": s.version, "prepared": s.prepared, "lo": s.lo, "hi": s.hi,
                "instance": s.instance, "folded": s.folded, "sha256": s.sha256}

    def describe(self, i: int) -> dict:
        return self._dict(self._unary(i, "Describe", timeout=10.0))

    def stage(self, i, push_id, codec_header, *, init, lo, hi):
        first = pb.ShardStageChunk(federation=self.fed.name, push_id=push_id, codec_header=codec_header, init=init,
                                   lo=lo, hi=hi)
        return _GrpcStage(self, i, first)

    def fold(self, i, push_id, client_id, round_version, **kw) -> float:
        request = pb.ShardFoldRequest(federation=self.fed.name, push_id=push_id, client_id=client_id,
                                      round=round_version, **kw)
        try:
            return self.stubs[i].Fold(request, metadata=self.metadata, timeout=_CALL_S).weight
        except grpc.RpcError as exc:
            raise _refusal(i, exc) from None

    def drop(self, i, push_ids) -> None:
        self._unary(i, "Drop", timeout=10.0, push_ids=push_ids)

    def install(self, i, push_id, version, manifest) -> dict:
        return self._dict(self._unary(i, "Install", push_ids=[push_id], version=version,
                                      manifest=manifest_to_proto(manifest)))

    def prepare(self, i, version, folded):
        s = self._unary(i, "Prepare", version=version, folded=folded)
        return s.ok, s.message, s.sq_norm

    def commit(self, i, version) -> dict:
        return self._dict(self._unary(i, "Commit", version=version))

    def abort(self, i, version) -> None:
        self._unary(i, "Abort", version=version)

    def sync(self, i, version, drop, keep=None) -> dict:
        return self._dict(self._unary(i, "Sync", version=version, push_ids=drop, keep=keep or [],
                                      keep_only=keep is not None))

    def read(self, i, version, offset):
        request = pb.ShardRequest(federation=self.fed.name, version=version, offset=offset)
        try:
            for chunk in self.stubs[i].ReadSlice(request, metadata=self.metadata, timeout=_CALL_S):
                yield chunk.data
        except grpc.RpcError as exc:
            raise _refusal(i, exc) from None


def serve_shard(fed: FederationConfig, cfg: ServerConfig, secret: str, credentials, ready_file: str | None) -> int:
    """Run shard `cfg.shard_index` until SIGTERM/SIGINT (its state is durable at every step: nothing to flush)."""
    core = ShardCore(fed, cfg.shard_index, cfg.checkpoint_dir)
    core.resume()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64), options=_SERVER_OPTIONS)
    pb_grpc.add_PsShardServicer_to_server(ShardServicer(core, secret), server)
    port, health_servicer = listen(server, cfg, credentials)
    server.start()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_servicer.set("geofed.v1.PsShard", health_pb2.HealthCheckResponse.SERVING)
    log.info("event=shard_listening index=%d port=%d version=%d", cfg.shard_index, port, core.model.version)
    if ready_file:
        Path(ready_file).write_text(str(port))
    log.info("event=signal signal=%s", wait_for_stop_signal().name)
    server.stop(5.0).wait()
    return 0
