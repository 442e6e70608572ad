"""The client's decode of a `grid_delta` model transfer: the same result as `model_delta.decode`, in one pass.

`model_delta.decode` rebuilds the zigzag differences level by level in numpy (a uint8 mask, a uint32
copy, a boolean-mask gather and scatter per 7-bit level), then applies them: about 2 GB of temporaries
for a 124M-parameter model. A rejoining client decodes in a fresh process, which meets each of those pages
for the first time, and that first touch (system CPU) can be most of the decode (`bench/rejoin_decode.py`
measures it).
Here the levels are read in order with one cursor each and applied straight into the output vector, so
the only large allocation is the vector itself. The arithmetic is `_grid_kernels.apply_diff`'s
(have + float32(d) · 2^e in fp32), so the output is bit for bit the same; the PS's sha256 checks it anyway.

Without numba (or with GEOFED_HUFFMAN=numpy) this is `model_delta.decode` itself.
"""

from __future__ import annotations

import numpy as np

from geofed.codec import huffman_jit, model_delta
from geofed.codec.errors import CodecError
from geofed.codec.header import Reader


def decode(have: np.ndarray, payload: bytes | memoryview | np.ndarray) -> np.ndarray:
    """`have` plus the encoded difference, as a new fp32 array; CodecError on malformed input."""
    if not huffman_jit.enabled():
        return model_delta.decode(have, payload)
    r = Reader(payload, "model delta")
    magic, version, numel, block, frame = r.unpack(model_delta._HEAD.format, "model delta header")
    if magic != model_delta.MAGIC or version != model_delta.VERSION:
        raise CodecError(f"not a model delta (magic {bytes(magic)!r}, version {version})")
    if numel != have.size:
        raise CodecError(f"model delta is for {numel} values, the held model has {have.size}")
    if not 1 <= block <= 1 << 26 or not 1 <= frame <= 1 << 26:
        raise CodecError(f"model delta block {block} or frame {frame} out of range")
    exps = r.array("<i2", model_delta.blocks_of(numel, block), "grid exponents")
    if exps.size and (exps.min() < model_delta.E_MIN or exps.max() > model_delta.E_MAX):
        raise CodecError("model delta grid exponent out of range")
    from ._grid_apply_kernel import apply_levels, count_continued  # numba: its import and cache load on first use

    levels: list[np.ndarray] = []
    expect = numel
    while expect:  # each stream's symbol count is checked against the continuations of the one before
        if len(levels) == model_delta._MAX_LEVELS:
            raise CodecError("model delta difference too large")
        syms = model_delta._decode_stream(r, expect, frame)
        levels.append(syms)
        expect = int(count_continued(syms))
    r.expect_end()
    empty = np.zeros(0, dtype=np.uint8)
    padded = levels + [empty] * (model_delta._MAX_LEVELS - len(levels))
    out = np.empty(numel, dtype=np.float32)
    if apply_levels(np.ascontiguousarray(have, np.float32), tuple(padded), exps, block, 2 * model_delta.D_LIMIT, out):
        raise CodecError("model delta difference too large")
    return out


def warm() -> None:
    """Load the compiled kernels now (numba's import and its on-disk cache), so the first transfer does not wait."""
    if huffman_jit.enabled():
        from ._grid_apply_kernel import apply_levels, count_continued

        one = np.zeros(1, dtype=np.uint8)
        count_continued(one)
        apply_levels(np.zeros(1, np.float32), (one, one[:0], one[:0], one[:0]), np.zeros(1, np.int16), 1, 2,
                     np.empty(1, np.float32))
