"""PS-to-PS gRPC (multi-PS groups): the `Peer` servicer and the transport that dials the other PSs.

Both sides authenticate with the secret the federation's PSs share (`authorization: Peer <secret>`,
compared in constant time) and name their federation; ring steps also carry a digest of the exchanged
layout, so a PS of another federation, or one holding another model, is refused with a message that
says which. Refusals from the ring itself (a version this PS has passed, an excluded sender) travel as
status codes and come back to the caller as `PeerError` kinds.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import logging
from pathlib import Path

import grpc
import numpy as np

from geofed.config import FederationConfig, ServerConfig
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import AUTH_KEY, credential_from
from geofed.protocol.channel import open_channel
from geofed.protocol.messages import manifest_from_proto, manifest_to_proto
from geofed.ps_groups import group_address

from .aggregation.ring import PeerError, RingKey, RingMessage, RingRefused
from .checkpoint import _join_arrays, _split_arrays  # the checkpoint's own state <-> (JSON, arrays) split
from .core import ParameterServerCore
from .global_model import GlobalModel, Manifest, sha256_of
from .group import GroupMember, PeerHead, PeerModel
from .registry import AuthError

log = logging.getLogger("geofed.ps")

_REFUSALS = {"ahead": grpc.StatusCode.OUT_OF_RANGE, "excluded": grpc.StatusCode.ABORTED,
             "refused": grpc.StatusCode.FAILED_PRECONDITION}
_KINDS = {code: kind for kind, code in _REFUSALS.items()}
_CHUNK = 2 << 20


def layout_digest(manifest: Manifest) -> bytes:
    """SHA-256 of the exchanged layout: names, shapes and dtypes in order."""
    return hashlib.sha256(json.dumps([[t.name, list(t.shape), t.dtype] for t in manifest]).encode()).digest()


def load_peer_secret(path: str | None) -> str:
    """The PS-to-PS secret; ValueError when missing or too short to be one."""
    if not path:
        raise ValueError("a federation with PS groups needs --peer-token-file (the secret its PSs share)")
    secret = Path(path).read_text().strip()
    if len(secret) < 16:
        raise ValueError(f"the peer secret in {path} is shorter than 16 characters")
    return secret


def _key_to_proto(key: RingKey) -> pb.RingKey:
    return pb.RingKey(version=key.version, members=list(key.members), attempt=key.attempt)


def _key_from_proto(k: pb.RingKey) -> RingKey:
    return RingKey(k.version, tuple(k.members), k.attempt)


class PeerServicer(pb_grpc.PeerServicer):
    """Peer RPCs: authenticate, check federation and layout, one call into the group member."""

    def __init__(self, core: ParameterServerCore, secret: str) -> None:
        self.core, self.secret = core, secret

    @property
    def group(self) -> GroupMember:
        return self.core.group  # type: ignore[return-value]

    def _check(self, context: grpc.ServicerContext, federation: str, sender: str, layout: bytes = b"") -> None:
        given = credential_from(context.invocation_metadata(), "Peer") or ""
        if not hmac.compare_digest(given.encode(), self.secret.encode()):
            self.core.metrics.auth_failures.labels("Peer").inc()
            log.warning("event=peer_refused sender=%r reason=credentials", sender[:64])
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong PS peer credentials")
        if federation != self.core.fed.name:
            log.warning("event=peer_refused sender=%r reason=federation federation=%r", sender[:64], federation[:64])
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"this PS belongs to federation {self.core.fed.name!r}, not {federation!r}")
        snap = self.core.model.current()
        if layout and snap is not None and layout != layout_digest(snap.manifest):
            log.warning("event=peer_refused sender=%r reason=layout", sender[:64])
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"PS {sender!r} holds another model: its exchanged layout differs from this PS's")

    def _refused(self, context: grpc.ServicerContext, exc: RingRefused):
        context.abort(_REFUSALS.get(exc.kind, grpc.StatusCode.FAILED_PRECONDITION), exc.message)

    def _group(self, context: grpc.ServicerContext) -> GroupMember:
        if not self.core.group.enabled:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this PS belongs to no PS group")
        return self.group

    def CheckSession(self, request: pb.CheckSessionRequest, context) -> pb.CheckSessionResponse:
        """Whose live session this is, for a service of the federation (the split-learning trainer)."""
        self._check(context, self.core.fed.name, "session-check")
        try:
            return pb.CheckSessionResponse(client_id=self.core.registry.session(request.session).client_id)
        except AuthError:
            return pb.CheckSessionResponse()

    def RingStep(self, request: pb.RingStepRequest, context) -> pb.RingStepResponse:
        self._check(context, request.federation, request.sender, request.layout)
        msg = RingMessage(_key_from_proto(request.key), request.sender, request.phase, request.step,
                          request.payload, {m.group: (m.weight, m.count) for m in request.meta},
                          tuple(request.candidates))
        try:
            self._group(context).reducer.deliver(msg)
        except RingRefused as exc:
            self._refused(context, exc)
        return pb.RingStepResponse()

    def RingAbort(self, request: pb.RingAbortRequest, context) -> pb.RingAbortResponse:
        self._check(context, request.federation, request.sender)
        return pb.RingAbortResponse(state=self._group(context).reducer.abort_request(_key_from_proto(request.key)))

    def RingJoin(self, request: pb.RingJoinRequest, context) -> pb.RingJoinResponse:
        self._check(context, request.federation, request.sender)
        try:
            self._group(context).reducer.join_request(request.sender)
        except RingRefused as exc:
            self._refused(context, exc)
        return pb.RingJoinResponse()

    def _consistent_state(self, context: grpc.ServicerContext, group: GroupMember):
        """The current snapshot and a copy of the strategy state that goes with it.

        The aggregator's lock guards both, but a ring holds it while it waits for the other PSs, one of
        which may be the PS asking. While this PS is inside `reduce` for the current version, nothing has
        been applied yet, so the state can be copied without the lock; the check after the copy makes sure
        the reduce had not returned (and the apply begun) meanwhile.
        """
        agg, reducer = self.core.aggregator, group.reducer
        locked = agg.lock.acquire(timeout=0.2)
        try:
            snap = self.core.model.current()
            if not locked and reducer.reducing != snap.version:
                context.abort(grpc.StatusCode.UNAVAILABLE, "this PS is applying a round: retry")
            state = copy.deepcopy(agg.strategy.state_dict())
            if not locked and (reducer.reducing != snap.version or self.core.model.current() is not snap):
                context.abort(grpc.StatusCode.UNAVAILABLE, "this PS moved on while copying its state: retry")
            return snap, state
        finally:
            if locked:
                agg.lock.release()

    def FetchModel(self, request: pb.FetchModelRequest, context):
        self._check(context, request.federation, request.sender)
        group = self._group(context)
        snap = self.core.model.current()  # published snapshots are immutable: no lock for the model itself
        head = pb.PeerModelChunk(version=snap.version if snap else 0, members=list(group.reducer.members),
                                 sha256=snap.sha256 if snap else b"")
        if snap is None or request.header_only:
            yield head
            return
        snap, state = self._consistent_state(context, group)
        head = pb.PeerModelChunk(version=snap.version, members=list(group.reducer.members), sha256=snap.sha256)
        arrays: dict[str, np.ndarray] = {}
        head.state_json = json.dumps(_split_arrays(state, arrays))
        head.manifest.extend(manifest_to_proto(snap.manifest))
        yield head
        for name, arr in [("", snap.flat), *arrays.items()]:
            arr = np.ascontiguousarray(arr)
            view = memoryview(arr.reshape(-1).view(np.uint8))
            for off in range(0, max(1, len(view)), _CHUNK):
                yield pb.PeerModelChunk(array=name, offset=off, total_bytes=len(view),
                                        data=bytes(view[off : off + _CHUNK]), dtype=arr.dtype.str,
                                        shape=list(arr.shape))


class PeerTransport:
    """Dials the other PSs of the federation (a `GroupTransport` over gRPC)."""

    def __init__(self, fed: FederationConfig, server: ServerConfig, secret: str) -> None:
        self.fed, self.me = fed, server.group or ""
        self.model: GlobalModel | None = None  # bound once the core exists: the layout ring steps carry
        ca = Path(server.peer_ca).read_bytes() if server.peer_ca else None
        self.metadata = ((AUTH_KEY, f"Peer {secret}"),)
        self.stubs = {
            g.name: pb_grpc.PeerStub(open_channel(group_address(fed.name, g), insecure=server.insecure, ca_cert=ca))
            for g in fed.groups if g.name != self.me
        }

    def bind(self, model: GlobalModel) -> None:
        self.model = model

    def layout(self) -> bytes:
        snap = self.model.current() if self.model is not None else None
        return layout_digest(snap.manifest) if snap is not None else b""

    def _call(self, peer: str, fn, request, timeout: float):
        try:
            return fn(request, metadata=self.metadata, timeout=timeout)
        except grpc.RpcError as exc:
            raise self._error(peer, exc) from None

    def _error(self, peer: str, exc: grpc.RpcError) -> PeerError:
        code = exc.code()
        kind = _KINDS.get(code, "unreachable")
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            kind = "refused"
        return PeerError(peer, kind, f"{code.name}: {exc.details()}")

    def send(self, peer: str, msg: RingMessage, timeout: float) -> None:
        request = pb.RingStepRequest(
            federation=self.fed.name, layout=self.layout(), sender=self.me, key=_key_to_proto(msg.key),
            phase=msg.phase, step=msg.step, payload=msg.payload, candidates=list(msg.candidates),
            meta=[pb.GroupWeight(group=g, weight=w, count=c) for g, (w, c) in msg.meta.items()],
        )
        self._call(peer, self.stubs[peer].RingStep, request, timeout)

    def abort(self, peer: str, key: RingKey, timeout: float) -> str:
        request = pb.RingAbortRequest(federation=self.fed.name, sender=self.me, key=_key_to_proto(key))
        return self._call(peer, self.stubs[peer].RingAbort, request, timeout).state

    def join(self, peer: str, timeout: float) -> None:
        self._call(peer, self.stubs[peer].RingJoin, pb.RingJoinRequest(federation=self.fed.name, sender=self.me),
                   timeout)

    def head(self, peer: str, timeout: float) -> PeerHead:
        request = pb.FetchModelRequest(federation=self.fed.name, sender=self.me, header_only=True)
        try:
            first = next(iter(self.stubs[peer].FetchModel(request, metadata=self.metadata, timeout=timeout)))
        except grpc.RpcError as exc:
            raise self._error(peer, exc) from None
        return PeerHead(first.version, first.sha256, tuple(first.members))

    def fetch(self, peer: str, timeout: float) -> PeerModel:
        request = pb.FetchModelRequest(federation=self.fed.name, sender=self.me)
        head, buffers, specs = None, {}, {}
        try:
            for chunk in self.stubs[peer].FetchModel(request, metadata=self.metadata, timeout=timeout):
                if head is None:
                    head = chunk
                    continue
                buf = buffers.setdefault(chunk.array, bytearray(chunk.total_bytes))
                buf[chunk.offset:chunk.offset + len(chunk.data)] = chunk.data
                specs[chunk.array] = (chunk.dtype, tuple(chunk.shape))
        except grpc.RpcError as exc:
            raise self._error(peer, exc) from None
        if head is None or "" not in buffers:
            raise PeerError(peer, "unreachable", "sent no model")
        arrays = {name: np.frombuffer(bytes(buf), dtype=np.dtype(specs[name][0])).reshape(specs[name][1]).copy()
                  for name, buf in buffers.items()}
        flat = arrays.pop("").astype(np.float32, copy=False)
        if sha256_of(flat) != head.sha256:
            raise PeerError(peer, "refused", "the fetched model does not match its digest")
        state = _join_arrays(json.loads(head.state_json or "{}"), arrays.__getitem__)
        return PeerModel(PeerHead(head.version, head.sha256, tuple(head.members)), flat,
                         manifest_from_proto(head.manifest), state)
