"""The client-facing servicer of a sharded PS's front: Join with the shard map, the model from the shards.

The front's core is the one `ParameterServerCore`, its aggregator running on a `ShardedEngine`; this servicer
adds the shard map to Join and streams the model as each shard's slice in index order (fp32: a shard's slice
is sent as its bytes; the digest on the last chunk is over the whole vector, computed once per version at
publish).
"""

from __future__ import annotations

import zlib

import grpc

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol.messages import manifest_to_proto

from ..grpc_api import ParameterServerServicer
from .engine import ShardedEngine
from .errors import ShardRefused, ShardUnavailable


class FrontServicer(ParameterServerServicer):
    """Client-facing RPCs of the front: Join with the shard map, the model streamed from the shards."""

    @property
    def shards(self) -> ShardedEngine:
        return self.core.aggregator.engine

    def _map_fields(self) -> dict:
        smap = self.shards.shard_map
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
        total = 4 * self.shards.shard_map.numel
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
        agg = self.shards
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
            smap = self.shards.shard_map
            chunk.shard_bounds.extend(smap.bounds)
            chunk.shard_map = smap.digest
        if offset + len(data) == total:
            chunk.sha256 = snap.sha256
        return chunk
