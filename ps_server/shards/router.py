"""The front's half of a sharded push: cut the payload into codec frames and route each by its offset.

Only frame prefixes are read (magic, body length, offset, count; `geofed.codec.header`), never a body:
a frame goes whole to the one shard whose slice holds it. A frame that crosses a shard boundary, or
arrives out of order, or claims a body larger than its element count can need, is refused before it is
forwarded. The master's initial model is the one exception to "the client cuts its frames": Θ0 travels
as fp32 (raw little-endian words), so the front cuts its frames at the boundaries itself, by slicing
bytes (no value is decoded or changed). Plain Python, no gRPC.
"""

from __future__ import annotations

from collections.abc import Iterator

from geofed.codec import CodecError
from geofed.codec.header import FRAME_PREFIX, pack_frame, parse_frame_prefix, parse_header
from geofed.codec.registry import codec_from_wire_name
from geofed.shard_map import ShardMap

from ..errors import InvalidPush, check_first_model_codec

_FP32_WORD = 4


class FrameRouter:
    """Feed payload bytes in any pieces; get (shard index, whole frame) in stream order."""

    def __init__(self, shard_map: ShardMap, codec_header: bytes, *, init: bool = False) -> None:
        try:
            h = parse_header(codec_header)
            codec = codec_from_wire_name(h.name)
            self._limits = codec.frame_decoder(h.params)  # parses the header's parameters, not a frame
        except CodecError as exc:
            raise InvalidPush("codec", f"codec header: {exc}") from exc
        if h.numel != shard_map.numel:
            raise InvalidPush("shape", f"delta has {h.numel} elements but the federation exchanges "
                              f"{shard_map.numel}")
        if init:
            check_first_model_codec(codec.spec.lossless)
        self.map, self.init, self.codec_name = shard_map, init, codec.name
        self._buf = bytearray()
        self._need: int | None = None  # whole length of the frame being assembled
        self.next = 0  # element where the next frame must start
        self.frames = 0

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        self._buf += data
        while True:
            if self._need is None:
                if len(self._buf) < FRAME_PREFIX.size:
                    return
                self._need = FRAME_PREFIX.size + self._check_prefix(bytes(self._buf[: FRAME_PREFIX.size]))
            if len(self._buf) < self._need:
                return
            frame = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            self._need = None
            yield from self._route(frame)

    def _check_prefix(self, prefix: bytes) -> int:
        try:
            body_len, offset, count = parse_frame_prefix(prefix)
        except CodecError as exc:
            raise InvalidPush("codec", f"payload: {exc}") from exc
        if offset != self.next:
            raise InvalidPush("codec", f"payload: frame starts at element {offset}, expected {self.next}")
        if count < 1 or offset + count > self.map.numel:
            raise InvalidPush("codec", f"payload: frame [{offset}, {offset + count}) is outside the "
                              f"{self.map.numel}-element vector")
        shard = self.map.owner(offset)
        hi = self.map.bounds[shard + 1]
        if offset + count > hi and not self.init:
            raise InvalidPush("shard_boundary", f"frame [{offset}, {offset + count}) crosses the boundary of PS "
                              f"shard {shard} at element {hi}: cut frames at the shard map's boundaries "
                              "(a client that has an older shard map must re-Join)")
        if body_len > self._limits.max_body_bytes(offset, count):
            raise InvalidPush("codec", f"payload: frame at {offset} claims a {body_len}-byte body, more than "
                              f"{count} elements need")
        self.next = offset + count
        return body_len

    def _route(self, frame: bytes) -> Iterator[tuple[int, bytes]]:
        _, start, count = parse_frame_prefix(frame[: FRAME_PREFIX.size])
        self.frames += 1
        end = start + count
        shard = self.map.owner(start)
        if end <= self.map.bounds[shard + 1]:
            yield shard, frame
            return
        body = memoryview(frame)[FRAME_PREFIX.size :]
        offset = start
        while offset < end:  # Θ0's fp32 frames only (checked above): cut at the boundaries by slicing words
            shard = self.map.owner(offset)
            stop = min(end, self.map.bounds[shard + 1])
            words = body[(offset - start) * _FP32_WORD : (stop - start) * _FP32_WORD]
            yield shard, pack_frame(offset, stop - offset, bytes(words))
            offset = stop

    def finish(self) -> None:
        if self._buf or self._need is not None:
            raise InvalidPush("codec", f"payload: {len(self._buf)} bytes of an incomplete frame at the end")
        if self.next != self.map.numel:
            raise InvalidPush("codec", f"payload: truncated, decoded frames up to element {self.next} of "
                              f"{self.map.numel}")
