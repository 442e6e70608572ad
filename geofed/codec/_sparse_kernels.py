"""numba kernels of the sparse codec's index stream (see `geofed.codec.sparse`): chunk-relative positions,
either at a fixed width or as Golomb-Rice codes of the gaps between them. LSB-first bitstreams.

Decoders validate while they read (a position past its chunk's end, positions not strictly increasing,
a code running past the body) and return an error code instead of raising: numba's exceptions carry no
context, the caller turns the code into a `CodecError` that says which chunk and what was wrong.
"""

from __future__ import annotations

import numpy as np

from geofed.codec.numba_jit import cached_njit

_U = np.uint64

OK, E_TRUNCATED, E_RANGE, E_ORDER, E_UNARY = 0, 1, 2, 3, 4


@cached_njit(nogil=True)
def rice_bits(gaps, r):  # pragma: no cover - compiled
    """Bits a Rice code with parameter `r` needs for `gaps`."""
    total = 0
    for g in gaps:
        total += (np.int64(g) >> r) + 1 + r
    return total


@cached_njit(nogil=True)
def encode(values, r, width, out):  # pragma: no cover - compiled
    """Each value in `width` bits (width > 0), else as a Rice code: (v >> r) one-bits, a zero bit, the low
    `r` bits. Returns bytes used."""
    acc = _U(0)
    nacc = 0
    pos = 0
    mask = (_U(1) << _U(r)) - _U(1)
    for v in values:
        if width > 0:
            acc |= _U(v) << _U(nacc)
            nacc += width
        else:
            q = np.int64(v) >> r
            while q > 0:  # unary part, up to 32 ones at a time
                take = min(q, 32)
                acc |= ((_U(1) << _U(take)) - _U(1)) << _U(nacc)
                nacc += take
                q -= take
                while nacc >= 8:
                    out[pos] = np.uint8(acc & _U(0xFF))
                    pos += 1
                    acc >>= _U(8)
                    nacc -= 8
            nacc += 1  # the terminating zero
            acc |= (_U(v) & mask) << _U(nacc)
            nacc += r
        while nacc >= 8:
            out[pos] = np.uint8(acc & _U(0xFF))
            pos += 1
            acc >>= _U(8)
            nacc -= 8
    if nacc > 0:
        out[pos] = np.uint8(acc & _U(0xFF))
        pos += 1
    return pos


@cached_njit(nogil=True)
def _bits(buf, bit, n):  # pragma: no cover - compiled
    v = 0
    for i in range(n):
        v |= np.int64((buf[(bit + i) >> 3] >> ((bit + i) & 7)) & 1) << i
    return v


@cached_njit(nogil=True)
def decode(buf, r, width, chunk_lens, k_per_chunk, out):  # pragma: no cover - compiled
    """Frame-relative positions of every chunk's entries, written by `encode` as chunk-relative positions
    (width > 0) or as Rice-coded gaps; returns (error code, chunk index, bytes read)."""
    nbits = buf.size * 8
    bit = 0
    o = 0
    start = 0
    for c in range(chunk_lens.size):
        prev = -1
        for _ in range(k_per_chunk[c]):
            if width > 0:
                if bit + width > nbits:
                    return E_TRUNCATED, c, 0
                p = _bits(buf, bit, width)
                bit += width
                if p < chunk_lens[c] and p <= prev:
                    return E_ORDER, c, 0
            else:
                q = 0
                while True:
                    if bit >= nbits:
                        return E_TRUNCATED, c, 0
                    b = (buf[bit >> 3] >> (bit & 7)) & 1
                    bit += 1
                    if b == 0:
                        break
                    q += 1
                    if q > chunk_lens[c]:  # no honest gap is longer than its chunk
                        return E_UNARY, c, 0
                if bit + r > nbits:
                    return E_TRUNCATED, c, 0
                p = prev + 1 + ((np.int64(q) << r) | _bits(buf, bit, r))
                bit += r
            if p >= chunk_lens[c]:
                return E_RANGE, c, 0
            out[o] = start + p
            o += 1
            prev = p
        start += chunk_lens[c]
    return OK, 0, (bit + 7) >> 3
