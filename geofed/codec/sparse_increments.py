"""Sparse model increments, the downlink of the sparse mode: the PS publishes each version as the previous
one plus a sparse-coded increment, and a client applies the same bytes with the same float32 additions, so
it ends bit-identical to the PS's model by construction (its sha256 is checked all the same).

One increment: u32 header length | sparse codec header | frames. A chain (a client several versions
behind): b"GFsi" | u32 count | count × (u64 length | increment), applied in order. Plain numpy, no torch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np

from geofed.codec.errors import CodecError
from geofed.codec.header import Reader
from geofed.codec.registry import decoder_for

CHAIN_MAGIC = b"GFsi"
MAX_CHAIN = 4096


def pack_increment(header: bytes, frames: Iterable[bytes]) -> bytes:
    """One encoded increment as a self-contained byte string."""
    return struct.pack("<I", len(header)) + header + b"".join(frames)


def apply_increment(flat: np.ndarray, increment: bytes | memoryview) -> None:
    """flat[i] += value for every sent (i, value) of `increment`, in place; CodecError if it is not sparse."""
    r = Reader(increment, "sparse increment")
    (hlen,) = r.unpack("<I", "header length")
    dec = decoder_for(bytes(r.take(hlen, "header")), max_numel=flat.size)
    if dec.numel != flat.size:
        raise CodecError(f"increment is for {dec.numel} values, the model has {flat.size}")
    if not dec.sparse:
        raise CodecError(f"increment is coded with {dec.codec_name}, not a sparse codec")
    for _off, (pos, values) in dec.feed_sparse(r.rest()):
        flat[pos] += values
    dec.finish()


def pack_chain(increments: Iterable[bytes]) -> bytes:
    """Several increments, oldest first, in one transfer."""
    items = list(increments)
    return CHAIN_MAGIC + struct.pack("<I", len(items)) + b"".join(struct.pack("<Q", len(b)) + b for b in items)


def apply_chain(held: np.ndarray, data: bytes | memoryview) -> np.ndarray:
    """A new vector: `held` plus every increment of the chain, in order (held itself is not modified)."""
    r = Reader(data, "sparse increment chain")
    if bytes(r.take(4, "magic")) != CHAIN_MAGIC:
        raise CodecError("not a sparse increment chain (bad magic)")
    (count,) = r.unpack("<I", "count")
    if not 1 <= count <= MAX_CHAIN:
        raise CodecError(f"increment chain of {count} increments (1..{MAX_CHAIN} allowed)")
    out = np.array(held, dtype=np.float32, copy=True)
    for _ in range(count):
        (n,) = r.unpack("<Q", "increment length")
        apply_increment(out, r.take(n, "increment"))
    r.expect_end()
    return out
