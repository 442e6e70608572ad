"""The front process of a sharded PS: the PS core and servicers with the shard machinery plugged in.

`FrontCore` is `ParameterServerCore` (registry, sessions, metrics, status, admin) whose aggregator is the
`ShardedAggregator` and whose pushes are received by `ShardedReceiver`; `FrontServicer` adds the shard map
to Join and streams the model as each shard's slice in index order (fp32: a shard's slice is sent as its
bytes; the digest on the last chunk is over the whole vector, computed once per version at publish).
"""

from __future__ import annotations

import logging
import time
import zlib

import grpc

from geofed.config import FederationConfig, ServerConfig
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol.messages import manifest_to_proto

from ..core import MAX_INIT_NUMEL, ParameterServerCore
from ..grpc_api import ParameterServerServicer
from ..ingest import PushHeader
from ..metrics import PSMetrics
from .errors import ShardRefused, ShardUnavailable
from .front import FrontModel, ShardedAggregator, ShardedReceiver
from .link import ShardLink

log = logging.getLogger("geofed.ps.front")


class FrontCore(ParameterServerCore):
    """The PS core of a sharded federation's front (see the module docstring)."""

    def __init__(self, fed: FederationConfig, server: ServerConfig, admin_credential: str, link: ShardLink,
                 metrics: PSMetrics | None = None) -> None:
        super().__init__(fed, server, admin_credential, metrics=metrics)
        self.model = FrontModel()
        self.aggregator = ShardedAggregator(
            fed, self.model, link, server.checkpoint_dir, active_clients=self.active_client_count,
            on_apply=self._on_apply, contributions=self.aggregator.contributions,
            on_staleness=self.metrics.staleness.observe,
            on_reject=lambda reason: self.metrics.rejected.labels(reason).inc(), unit_of=self.unit_of,
        )

    def resume(self) -> bool:
        registry = self.store.load_registry()
        if registry is not None:
            self.registry.load_state_dict(registry)
        resumed = self.aggregator.load_state()
        if resumed:
            self.metrics.global_version.set(self.model.version)
            log.info("event=front_resume version=%d shards=%d", self.model.version, self.aggregator.link.shards)
        return resumed or registry is not None

    def checkpoint(self) -> bool:
        """The front's own record (committed version, upload ids, ledger); the shards hold the model."""
        try:
            self.aggregator.save_state()
        except OSError as exc:
            self.metrics.checkpoint_failures.inc()
            log.error("event=checkpoint_failed error=%s", exc)
            return False
        return True

    def begin_push(self, session, header: PushHeader):
        done = self.aggregator.precheck(session.client_id, header, master=session.master)
        if done is not None:
            self._count_stale(session.client_id, done)
            return None, done
        receiver = ShardedReceiver(self.aggregator, client_id=session.client_id,
                                   max_upload_bytes=self.server.max_upload_bytes, max_init_numel=MAX_INIT_NUMEL)
        receiver.on_header(header)
        self._client(session).push_started = time.time()
        return receiver, None

    def status(self) -> dict:
        out = super().status()
        out["num_parameters"] = self.aggregator.shard_map.numel if self.aggregator.shard_map else 0
        out["shards"] = [pb.ShardStatus(**s) for s in self.aggregator.shard_status()]
        return out


class FrontServicer(ParameterServerServicer):
    """Client-facing RPCs of the front: Join with the shard map, the model streamed from the shards."""

    core: FrontCore

    def _map_fields(self) -> dict:
        smap = self.core.aggregator.shard_map
        return {"shard_bounds": list(smap.bounds), "shard_map": smap.digest} if smap else {}

    def Join(self, request, context):
        response = super().Join(request, context)
        for key, value in self._map_fields().items():
            if key == "shard_bounds":
                response.shard_bounds.extend(value)
            else:
                response.shard_map = value
        return response

    def _transfer(self, snap, have: int, request: pb.StreamModelRequest, context: grpc.ServicerContext):
        """fp32 from the shards, whatever `have` is (the client replaces its vector; no difference is coded)."""
        total = 4 * self.core.aggregator.shard_map.numel
        start = 0
        if request.resume_version == snap.version and request.resume_offset:
            if request.resume_offset >= total:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "resume_offset outside the model transfer")
            start = request.resume_offset
        try:
            yield from self._chunks(snap, start, total)
        except (ShardUnavailable, ShardRefused) as exc:
            # a shard went away or moved on mid-transfer: the client resumes, or takes the next version
            context.abort(grpc.StatusCode.UNAVAILABLE, f"model transfer interrupted: {exc.message}")

    def _chunks(self, snap, start: int, total: int):
        """fp32 bytes of `snap` from byte `start`: shard slices in index order, re-cut into chunk_bytes."""
        agg = self.core.aggregator
        chunk_bytes = self.core.server.chunk_bytes
        first, offset, pending = True, start, bytearray()
        for i in range(agg.link.shards):
            lo, hi = agg.shard_map.slice_of(i)
            if 4 * hi <= start:
                continue
            for data in agg.call(agg.link.read, i, snap.version, max(0, start - 4 * lo)):
                pending += data
                while len(pending) >= chunk_bytes:
                    yield self._chunk(snap, offset, total, bytes(pending[:chunk_bytes]), first)
                    first = False
                    offset += chunk_bytes
                    del pending[:chunk_bytes]
        if pending or first:
            yield self._chunk(snap, offset, total, bytes(pending), first)

    def _chunk(self, snap, offset: int, total: int, data: bytes, first: bool) -> pb.ModelChunk:
        chunk = pb.ModelChunk(version=snap.version, offset=offset, total_bytes=total, data=data, encoding="fp32",
                              crc32=zlib.crc32(data))
        if first:
            chunk.manifest.extend(manifest_to_proto(snap.manifest))
            smap = self.core.aggregator.shard_map
            chunk.shard_bounds.extend(smap.bounds)
            chunk.shard_map = smap.digest
        if offset + len(data) == total:
            chunk.sha256 = snap.sha256
        return chunk
