"""One self-describing compressed vector in one bytes object: u32 header length, codec header, frames.

For messages that carry a whole (small) vector at once instead of streaming it: the ring all-reduce's
chunks between PSs and the split-learning activations, gradients and auxiliary weights.
"""

from __future__ import annotations

import struct

import numpy as np

from geofed.codec.errors import CodecError
from geofed.codec.registry import decoder_for, make_codec


def pack(values: np.ndarray, codec: str) -> bytes:
    """`values` (any shape, as float32) encoded with `codec` ("fp32", "bf16", "int8", "int16")."""
    header, frames = make_codec(codec).encode(np.ascontiguousarray(values, dtype=np.float32).reshape(-1))
    return struct.pack("<I", len(header)) + header + b"".join(frames)


def unpack(data: bytes, numel: int) -> np.ndarray:
    """Exactly `numel` float32 values from `pack`'s bytes; CodecError if they are anything else."""
    if len(data) < 4:
        raise CodecError("packed vector shorter than its header length")
    (hlen,) = struct.unpack_from("<I", data)
    if hlen > len(data) - 4:
        raise CodecError("packed vector's header runs past its end")
    dec = decoder_for(data[4 : 4 + hlen], max_numel=numel)
    out = np.empty(numel, dtype=np.float32)
    filled = 0
    for offset, values in dec.feed(memoryview(data)[4 + hlen :]):
        out[offset : offset + values.size] = values
        filled += values.size
    dec.finish()
    if filled != numel:
        raise CodecError(f"packed vector holds {filled} values, expected {numel}")
    return out
