"""A shard's decoder: the frames of one slice [lo, hi) of a stream, checked against the shard-map framing.

The front forwards the client's codec header unchanged (it names the codec, the whole vector's numel and
global parameters such as Huffman tables or per-block ranges) and, one by one, the frames whose offsets
fall in this shard's slice. Frames must come in order, start at `lo`, end where `geofed.shard_map`'s
framing says (the frame grid, cut at the slice's end) and cover the slice exactly; a frame that crosses
the slice's end or starts outside it is refused with a message that says so. Values come out with
slice-local offsets.
"""

from __future__ import annotations

import numpy as np

from geofed.codec import CodecError
from geofed.codec.header import FRAME_PREFIX, parse_frame_prefix, parse_header
from geofed.codec.registry import codec_from_wire_name
from geofed.shard_map import expected_frame_end

from .errors import ShardRefused


class SliceDecoder:
    """Decodes the frames of [lo, hi) of a `numel`-element stream; raises ShardRefused on the first problem."""

    def __init__(self, codec_header: bytes, *, lo: int, hi: int, numel: int) -> None:
        try:
            h = parse_header(codec_header)
            self.codec_name = codec_from_wire_name(h.name).name
            self._frames = codec_from_wire_name(h.name).frame_decoder(h.params)
        except CodecError as exc:
            raise ShardRefused("codec", f"codec header: {exc}") from exc
        if h.numel != numel:
            raise ShardRefused("codec", f"delta has {h.numel} elements but the federation exchanges {numel}")
        self.lo, self.hi, self.frame_elems = lo, hi, h.frame_elems
        self.next = lo  # where the next frame must start

    @property
    def done(self) -> bool:
        return self.next == self.hi

    def feed(self, frame: bytes) -> tuple[int, np.ndarray]:
        """(slice-local offset, float32 values) of one whole frame."""
        if len(frame) < FRAME_PREFIX.size:
            raise ShardRefused("frame", f"a frame of {len(frame)} bytes is shorter than its prefix")
        try:
            body_len, offset, count = parse_frame_prefix(frame[: FRAME_PREFIX.size])
        except CodecError as exc:
            raise ShardRefused("frame", str(exc)) from exc
        if not self.lo <= offset < self.hi:
            raise ShardRefused("slice", f"frame at element {offset} is outside this shard's slice "
                               f"[{self.lo}, {self.hi})")
        if offset != self.next:
            raise ShardRefused("frame", f"frame starts at element {offset}, expected {self.next} (out of order?)")
        end = expected_frame_end(offset, self.frame_elems, self.hi)
        if offset + count > self.hi:
            raise ShardRefused("slice", f"frame [{offset}, {offset + count}) crosses the shard boundary at "
                               f"{self.hi}: frames must be cut at the shard map's boundaries")
        if offset + count != end:
            raise ShardRefused("frame", f"frame at {offset} holds {count} elements, expected {end - offset}")
        if body_len != len(frame) - FRAME_PREFIX.size or body_len > self._frames.max_body_bytes(offset, count):
            raise ShardRefused("frame", f"frame at {offset} has a {len(frame) - FRAME_PREFIX.size}-byte body, "
                               f"its prefix says {body_len}")
        try:
            values = self._frames.decode(offset, count, memoryview(frame)[FRAME_PREFIX.size :])
        except CodecError as exc:
            raise ShardRefused("codec", f"payload: {exc}") from exc
        self.next = offset + count
        return offset - self.lo, values

    def finish(self) -> None:
        if not self.done:
            raise ShardRefused("frame", f"the push ended at element {self.next} of this shard's slice "
                               f"[{self.lo}, {self.hi})")
