"""Pass-through float codecs: fp32 (lossless) and bf16 (round-to-nearest-even, the paper's BF16 option).

They exist for fast links and for debugging; values travel as sent, NaN/Inf included, and the PS checks
finiteness itself. Frames are raw little-endian words.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence

import numpy as np

from geofed.codec.base import DEFAULT_FRAME_ELEMS, Codec, FrameDecoder, check_encode_args, frame_ranges
from geofed.codec.errors import CodecError
from geofed.codec.header import StreamHeader, pack_frame, pack_header
from geofed.codec_specs import BF16, FP32


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), rounding to nearest even; NaNs stay (quiet) NaNs."""
    u = x.view(np.uint32)
    rounded = ((u + (np.uint32(0x7FFF) + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


class _FloatCodec(Codec):
    """Shared framing of the pass-through float codecs; subclasses say how one frame is written and read."""

    bytes_per_elem: int

    @abstractmethod
    def _body(self, x: np.ndarray) -> bytes:
        """One frame's payload bytes."""

    @abstractmethod
    def _residual(self, x: np.ndarray, out: np.ndarray) -> None:
        """x − decode(encode(x)) into `out` (error feedback)."""

    def encode(
        self,
        flat: np.ndarray,
        *,
        frame_elems: int = DEFAULT_FRAME_ELEMS,
        residual_out: np.ndarray | None = None,
        cuts: Sequence[int] = (),
    ) -> tuple[bytes, Iterator[bytes]]:
        check_encode_args(flat, frame_elems, residual_out)
        if residual_out is not None:
            for a, b in frame_ranges(flat.size, frame_elems, cuts):
                self._residual(flat[a:b], residual_out[a:b])
        header = pack_header(StreamHeader(self.name, flat.size, int(frame_elems), b""))
        ranges = frame_ranges(flat.size, frame_elems, cuts)
        return header, (pack_frame(a, b - a, self._body(flat[a:b])) for a, b in ranges)

    def frame_decoder(self, params: bytes) -> FrameDecoder:
        if params:
            raise CodecError(f"{self.name} header carries {len(params)} unexpected parameter bytes")
        return _FloatFrameDecoder(self)

    @abstractmethod
    def decode_body(self, body: bytes, count: int) -> np.ndarray:
        """One frame's `count` float32 values."""


class Fp32Codec(_FloatCodec):
    """Lossless: the values' own little-endian bytes."""

    spec = FP32
    bytes_per_elem = 4
    name = "fp32"

    def _body(self, x: np.ndarray) -> bytes:
        return x.astype("<f4", copy=False).tobytes()

    def _residual(self, x: np.ndarray, out: np.ndarray) -> None:
        out[...] = 0

    def decode_body(self, body: bytes, count: int) -> np.ndarray:
        return np.frombuffer(body, dtype="<f4").astype(np.float32)


class Bf16Codec(_FloatCodec):
    """Top 16 bits of each float after rounding: 2 bytes per element, ~3 significant digits."""

    spec = BF16
    bytes_per_elem = 2
    name = "bf16"

    def _body(self, x: np.ndarray) -> bytes:
        return to_bf16_bits(x).astype("<u2", copy=False).tobytes()

    def _residual(self, x: np.ndarray, out: np.ndarray) -> None:
        np.subtract(x, from_bf16_bits(to_bf16_bits(x)), out=out)

    def decode_body(self, body: bytes, count: int) -> np.ndarray:
        return from_bf16_bits(np.frombuffer(body, dtype="<u2"))


class _FloatFrameDecoder(FrameDecoder):
    def __init__(self, codec: _FloatCodec) -> None:
        self.codec = codec

    def max_body_bytes(self, offset: int, count: int) -> int:
        return count * self.codec.bytes_per_elem

    def decode(self, offset: int, count: int, body: bytes | memoryview) -> np.ndarray:
        need = count * self.codec.bytes_per_elem
        if len(body) != need:
            raise CodecError(f"{self.codec.name} frame at {offset} has {len(body)} bytes, {count} values need {need}")
        return self.codec.decode_body(body, count)
