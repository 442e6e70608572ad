"""A codec geofed does not ship, its facts declared once: IEEE half floats, 2 bytes a value.

Tests import it, and `GEOFED_PLUGINS=tests.plugins.fp16_codec` makes it a codec every geofed process of a
federation knows (`geofed.plugins`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from geofed.codec import CodecError
from geofed.codec.base import DEFAULT_FRAME_ELEMS, Codec, FrameDecoder, check_encode_args, frame_ranges
from geofed.codec.header import StreamHeader, pack_frame, pack_header
from geofed.codec_specs import CodecSpec

FP16 = CodecSpec("fp16", value_bits=16)  # dense, not split by ranks, not exact


class Fp16Codec(Codec):
    """IEEE half floats, 2 bytes a value: a codec no geofed module knows."""

    spec = FP16
    name = "fp16"

    def encode(self, flat: np.ndarray, *, frame_elems: int = DEFAULT_FRAME_ELEMS,
               residual_out: np.ndarray | None = None, cuts: Sequence[int] = ()) -> tuple[bytes, Iterator[bytes]]:
        check_encode_args(flat, frame_elems, residual_out)
        if residual_out is not None:
            np.subtract(flat, flat.astype(np.float16).astype(np.float32), out=residual_out)
        header = pack_header(StreamHeader(self.name, flat.size, int(frame_elems), b""))
        return header, (pack_frame(a, b - a, flat[a:b].astype("<f2").tobytes())
                        for a, b in frame_ranges(flat.size, frame_elems, cuts))

    def frame_decoder(self, params: bytes) -> FrameDecoder:
        return _Fp16Frames()


class _Fp16Frames(FrameDecoder):
    def max_body_bytes(self, offset: int, count: int) -> int:
        return 2 * count

    def decode(self, offset: int, count: int, body: bytes | memoryview) -> np.ndarray:
        if len(body) != 2 * count:
            raise CodecError(f"fp16 frame at {offset} has {len(body)} bytes, {count} values need {2 * count}")
        return np.frombuffer(body, dtype="<f2").astype(np.float32)
