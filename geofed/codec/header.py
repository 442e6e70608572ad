"""Safe binary layout of the stream header and of each frame's prefix (struct + numpy, never pickle).

Header (little-endian)::

    b"GFDC" | u8 version | u8 len(name) | name (ASCII) | u64 numel | u32 frame_elems
    | u32 len(params) | params

Frame::

    b"GFfr" | u32 len(body) | u64 offset | u32 count | body

`params` and `body` are codec-specific; `Reader` bounds-checks every read so truncation becomes a
`CodecError` that says what was missing instead of an `IndexError` or a silent short read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from geofed.codec.errors import CodecError

MAGIC = b"GFDC"
VERSION = 1
FRAME_MAGIC = b"GFfr"
FRAME_PREFIX = struct.Struct("<4sIQI")
MAX_FRAME_ELEMS = 1 << 26
"""Largest frame a decoder accepts: bounds per-frame memory (256 MiB of fp32) and keeps bit offsets in u32."""


class Reader:
    """Sequential, bounds-checked reads from a byte string; `what` names the structure in error messages."""

    def __init__(self, data: bytes | memoryview, what: str) -> None:
        self._data = memoryview(data).cast("B")
        self._pos = 0
        self._what = what

    @property
    def remaining(self) -> int:
        return len(self._data) - self._pos

    def take(self, n: int, field: str) -> memoryview:
        """The next `n` bytes; CodecError naming `field` if fewer remain."""
        if n < 0 or n > self.remaining:
            raise CodecError(
                f"truncated {self._what}: {field} needs {n} bytes at offset {self._pos}, only {self.remaining} left"
            )
        out = self._data[self._pos : self._pos + n]
        self._pos += n
        return out

    def unpack(self, fmt: str, field: str) -> tuple:
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size, field))

    def array(self, dtype: str, count: int, field: str) -> np.ndarray:
        """`count` items of a little-endian numpy dtype, converted to native order (a fresh array)."""
        dt = np.dtype(dtype)
        raw = self.take(dt.itemsize * count, field)
        return np.frombuffer(raw, dtype=dt).astype(dt.newbyteorder("="))

    def rest(self) -> memoryview:
        return self.take(self.remaining, "remainder")

    def expect_end(self) -> None:
        if self.remaining:
            raise CodecError(f"{self._what} has {self.remaining} unexpected trailing bytes")


@dataclass(frozen=True)
class StreamHeader:
    """What every header carries; `params` is the codec-specific tail (scales, code tables)."""

    name: str
    numel: int
    frame_elems: int
    params: bytes


def pack_header(h: StreamHeader) -> bytes:
    name = h.name.encode("ascii")
    return (
        MAGIC
        + struct.pack("<BB", VERSION, len(name))
        + name
        + struct.pack("<QII", h.numel, h.frame_elems, len(h.params))
        + h.params
    )


def parse_header(data: bytes) -> StreamHeader:
    """Split a header into its common fields; the codec validates `params` itself."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"header must be bytes, got {type(data).__name__}")
    r = Reader(data, "header")
    magic = bytes(r.take(4, "magic"))
    if magic != MAGIC:
        raise CodecError(f"bad header magic {magic!r}, expected {MAGIC!r}")
    version, name_len = r.unpack("<BB", "version")
    if version != VERSION:
        raise CodecError(f"unsupported header version {version}, this decoder reads version {VERSION}")
    try:
        name = bytes(r.take(name_len, "codec name")).decode("ascii")
    except UnicodeDecodeError as exc:
        raise CodecError("codec name in header is not ASCII") from exc
    numel, frame_elems, params_len = r.unpack("<QII", "sizes")
    params = bytes(r.take(params_len, "codec parameters"))
    r.expect_end()
    if numel > 0 and not 1 <= frame_elems <= MAX_FRAME_ELEMS:
        raise CodecError(f"frame_elems {frame_elems} outside [1, {MAX_FRAME_ELEMS}]")
    return StreamHeader(name=name, numel=numel, frame_elems=frame_elems, params=params)


def pack_frame(offset: int, count: int, body: bytes) -> bytes:
    return FRAME_PREFIX.pack(FRAME_MAGIC, len(body), offset, count) + body


def parse_frame_prefix(prefix: bytes | memoryview) -> tuple[int, int, int]:
    """(body_len, offset, count) of a frame whose first `FRAME_PREFIX.size` bytes are given."""
    magic, body_len, offset, count = FRAME_PREFIX.unpack(prefix)
    if magic != FRAME_MAGIC:
        raise CodecError(f"bad frame magic {magic!r}, expected {FRAME_MAGIC!r} (corrupt or misaligned stream)")
    return body_len, offset, count
