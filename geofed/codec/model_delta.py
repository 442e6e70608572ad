"""Exact, compressed model differences for the downlink: a published model on power-of-two grids.

The PS publishes P_v = 2^e_b · round(T_v / 2^e_b) per block b of the true model T_v (`snap_to_grid`):
rounding to the grid *is* server-side error feedback, because the next version is rounded from the true
model again, so the published model never drifts more than half a grid step from T and nothing
accumulates. Grid exponents are chosen so every grid value is an exact fp32 (|P / 2^e| < 2^23), which
makes the difference between two published versions an exact integer multiple D of 2^min(e_have, e_v)
per block. A client holding P_have computes P_have + float32(D) · 2^e in fp32; the exact sum is an fp32
number, so IEEE rounding returns it unchanged: every client ends bit-identical to the PS's P_v. Zero
lies on every grid, so a whole published vector is its difference from zeros (often smaller than fp32).

Payload (little-endian)::

    b"GFdl" | u8 version | u64 numel | u32 block | u32 frame | i16[blocks] e | byte streams

D is zigzag-coded, then cut into 7-bit groups: byte stream k holds group k of every value that has one
(bit 7 set = another group follows), each coded with the delta codec's Huffman stage as
u32 count | u32 len(params) | params | frames (u32 len | body). Most values fit the first stream.
"""

from __future__ import annotations

import struct

import numpy as np

from geofed.codec.entropy import build_stage, read_stage
from geofed.codec.errors import CodecError
from geofed.codec.header import Reader

MAGIC = b"GFdl"
VERSION = 1
GRID_BLOCK = 1 << 14
"""Elements sharing one grid exponent: small enough to follow layers of different scale."""
FRAME = 1 << 20
"""Symbols per entropy-coded frame (bounds decode memory)."""
E_MIN, E_MAX = -120, 100
"""Exponents stay where 2^e and D·2^e are normal fp32 numbers."""
D_LIMIT = 1 << 23
"""|D| below this converts to fp32 exactly; a larger difference goes as a full snapshot instead."""
INIT_BITS = 12
"""First version: 2^12 grid steps per rms of a block's values (relative error ~1e-4, like 13-bit mantissas)."""
_MAX_LEVELS = 4  # 7 bits each: enough for |D| < D_LIMIT
_HEAD = struct.Struct("<4sBQII")


def blocks_of(numel: int, block: int = GRID_BLOCK) -> int:
    return -(-numel // block)


def _block_reduce(values: np.ndarray, block: int, ufunc) -> np.ndarray:
    return ufunc.reduceat(values, np.arange(0, values.size, block))


def exactness_floor(true: np.ndarray, block: int = GRID_BLOCK) -> np.ndarray:
    """Smallest exponent per block whose grid values are all exact fp32 numbers (|x| < 2^(e+23))."""
    return _floor_of(_block_reduce(np.abs(true), block, np.maximum))


def _floor_of(peak: np.ndarray) -> np.ndarray:
    _, ex = np.frexp(peak.astype(np.float64))  # peak < 2^ex
    return np.clip(ex.astype(np.int32) - 23, E_MIN, E_MAX).astype(np.int16)


def _block_stats(true: np.ndarray, prev: np.ndarray | None, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(max |true|, rms of true - prev, or of true without `prev`) per block: one compiled pass, or numpy."""
    counts = np.diff(np.append(np.arange(0, true.size, block), true.size))
    k = _kernels()
    if k is not None:
        peak, sq = np.empty(counts.size), np.empty(counts.size)
        k.block_stats(np.ascontiguousarray(true, np.float32),
                      np.zeros(0, np.float32) if prev is None else np.ascontiguousarray(prev, np.float32),
                      block, peak, sq)
        return peak, np.sqrt(sq / counts)
    peak = _block_reduce(np.abs(true), block, np.maximum)
    return peak, _block_rms(true if prev is None else true.astype(np.float64) - prev, block)


def _block_rms(values: np.ndarray, block: int) -> np.ndarray:
    v = values.astype(np.float64)
    counts = np.diff(np.append(np.arange(0, v.size, block), v.size))
    return np.sqrt(_block_reduce(v * v, block, np.add) / counts)


def choose_exponents(true: np.ndarray, prev: np.ndarray | None, prev_exps: np.ndarray | None, steps: float,
                     block: int = GRID_BLOCK) -> np.ndarray:
    """Grid exponent per block: about `steps` grid steps per rms of the change since `prev`.

    Hysteresis (an exponent moves only when the ideal one is 2 or more away) keeps consecutive versions on
    the same grid, so the integer differences stay small. The first version (no `prev`) gets 2^INIT_BITS
    steps per rms of its values (all-zero blocks take the median exponent), fine enough for an initial
    model and usually within reach of the first updates' grid.
    """
    first = prev is None or prev_exps is None
    peak, rms = _block_stats(true, None if first else prev, block)
    floor = _floor_of(peak)
    with np.errstate(divide="ignore"):
        if first:
            ideal = np.floor(np.log2(rms)) - INIT_BITS
            known = np.isfinite(ideal)
            fill = np.median(ideal[known]) if known.any() else E_MIN
            exps = np.where(known, np.nan_to_num(ideal), fill)
        else:
            ideal = np.floor(np.log2(rms / steps))
            moved = np.isfinite(ideal) & (np.abs(ideal - prev_exps) >= 2)
            exps = np.where(moved, np.nan_to_num(ideal), prev_exps.astype(np.float64))
    return np.clip(np.maximum(exps, floor), E_MIN, E_MAX).astype(np.int16)


def _scales(exps: np.ndarray, numel: int, block: int) -> np.ndarray:
    return np.repeat(np.ldexp(np.float32(1), exps.astype(np.int32)).astype(np.float32), block)[:numel]


def snap_to_grid(true: np.ndarray, exps: np.ndarray, block: int = GRID_BLOCK) -> np.ndarray:
    """The published fp32 model: each block of `true` rounded to its grid 2^e (no -0.0, bit-stable)."""
    k = _kernels()
    if k is not None:
        out = np.empty(true.size, dtype=np.float32)
        k.snap(np.ascontiguousarray(true, np.float32), exps.astype(np.int16), block, out)
        return out
    scale = _scales(exps, true.size, block)
    out = np.rint(true / scale) * scale  # true/scale and ·scale are exact (powers of two)
    out += np.float32(0.0)  # -0.0 -> +0.0: the client's sums never produce -0.0
    return out.astype(np.float32, copy=False)


def encode(have: np.ndarray, have_exps: np.ndarray, new: np.ndarray, new_exps: np.ndarray,
           block: int = GRID_BLOCK, frame: int = FRAME) -> bytes | None:
    """The payload taking `have` to `new` exactly; None when it cannot be exact (a full snapshot then)."""
    if have.size != new.size or have.size >= 1 << 32:
        return None
    exps = np.minimum(have_exps, new_exps).astype(np.int16)
    z = _zigzag_diff(have, new, exps, block)
    if z is None:  # off the grid (not grid-published versions) or too far apart for exact fp32 steps
        return None
    parts = [_HEAD.pack(MAGIC, VERSION, new.size, block, frame), exps.astype("<i2").tobytes()]
    while z.size:  # one byte stream per 7 bits of magnitude: usually only the first
        more = z >= 128
        syms = np.where(more, 128 | (z & 127), z).astype(np.uint8)
        parts.append(_encode_stream(syms, frame))
        z = z[more] >> 7
    return b"".join(parts)


def _encode_stream(syms: np.ndarray, frame: int) -> bytes:
    """u32 count | u32 len(params) | params | frames (u32 len | body)."""
    stage = build_stage("huffman", 8, np.bincount(syms, minlength=256), min(frame, syms.size))
    params = stage.params()
    enc = stage.encoder(min(frame, syms.size))
    parts = [struct.pack("<II", syms.size, len(params)), params]
    for start in range(0, syms.size, frame):
        body = enc(syms[start : start + frame])
        parts += [struct.pack("<I", len(body)), body]
    return b"".join(parts)


def _decode_stream(r: Reader, expect: int, frame: int) -> np.ndarray:
    count, plen = r.unpack("<II", "byte stream header")
    if count != expect:
        raise CodecError(f"model delta byte stream holds {count} symbols, {expect} expected")
    stage = read_stage("huffman", 8, Reader(r.take(plen, "entropy parameters"), "entropy parameters"))
    syms = np.empty(count, dtype=np.uint8)
    for start in range(0, count, frame):
        n = min(frame, count - start)
        (blen,) = r.unpack("<I", "frame length")
        syms[start : start + n] = stage.decode(Reader(r.take(blen, "frame"), "model delta frame"), n)
    return syms


def numel_of(payload: bytes | memoryview) -> int:
    """The model size a payload is for (read from its header; CodecError when it is not one)."""
    magic, version, numel, _, _ = Reader(payload, "model delta").unpack(_HEAD.format, "model delta header")
    if magic != MAGIC or version != VERSION:
        raise CodecError(f"not a model delta (magic {bytes(magic)!r}, version {version})")
    return numel


def decode(have: np.ndarray, payload: bytes | memoryview) -> np.ndarray:
    """`have` plus the encoded difference, as a new fp32 array; CodecError on malformed input."""
    r = Reader(payload, "model delta")
    magic, version, numel, block, frame = r.unpack(_HEAD.format, "model delta header")
    if magic != MAGIC or version != VERSION:
        raise CodecError(f"not a model delta (magic {bytes(magic)!r}, version {version})")
    if numel != have.size:
        raise CodecError(f"model delta is for {numel} values, the held model has {have.size}")
    if not 1 <= block <= 1 << 26 or not 1 <= frame <= 1 << 26:
        raise CodecError(f"model delta block {block} or frame {frame} out of range")
    exps = r.array("<i2", blocks_of(numel, block), "grid exponents")
    if exps.size and (exps.min() < E_MIN or exps.max() > E_MAX):
        raise CodecError("model delta grid exponent out of range")
    levels = []
    expect = numel
    while expect:
        if len(levels) == _MAX_LEVELS:
            raise CodecError("model delta difference too large")
        syms = _decode_stream(r, expect, frame)
        levels.append(syms)
        expect = int(np.count_nonzero(syms >= 128))
    r.expect_end()
    z = np.zeros(0, dtype=np.uint32)
    for syms in reversed(levels):  # rebuild from the top 7 bits down
        low = (syms & 127).astype(np.uint32)
        low[syms >= 128] |= z << 7
        z = low
    if z.size and int(z.max()) >= 2 * D_LIMIT:
        raise CodecError("model delta difference too large")
    return _apply_diff(have, z, exps, block)


def _kernels():
    """The compiled passes (numba), or None to use numpy (not installed, or GEOFED_HUFFMAN=numpy)."""
    from geofed.codec import huffman_jit

    if not huffman_jit.enabled():
        return None
    from geofed.codec import _grid_kernels

    return _grid_kernels


def _zigzag_diff(have: np.ndarray, new: np.ndarray, exps: np.ndarray, block: int) -> np.ndarray | None:
    """zigzag((new - have) / 2^e) per block as uint32; None when not exact."""
    k = _kernels()
    if k is not None:
        z = np.empty(new.size, dtype=np.uint32)
        bad = k.zigzag_diff(np.ascontiguousarray(have, np.float32), np.ascontiguousarray(new, np.float32), exps,
                            block, float(D_LIMIT), z)
        return None if bad else z
    d = (new.astype(np.float64) - have) / _scales(exps, new.size, block).astype(np.float64)
    if np.abs(d).max(initial=0.0) >= D_LIMIT:
        return None
    di = d.astype(np.int64)
    if not np.array_equal(di, d):
        return None
    return ((di << 1) ^ (di >> 63)).astype(np.uint32)


def _apply_diff(have: np.ndarray, z: np.ndarray, exps: np.ndarray, block: int) -> np.ndarray:
    """have + unzigzag(z) · 2^e in fp32: exact, the true sum being an fp32 number (module docstring)."""
    k = _kernels()
    if k is not None:
        out = np.empty(have.size, dtype=np.float32)
        k.apply_diff(np.ascontiguousarray(have, np.float32), z, exps.astype(np.int16), block, out)
        return out
    zi = z.astype(np.int64)
    out = ((zi >> 1) ^ -(zi & 1)).astype(np.float32)
    out *= _scales(exps, have.size, block)
    out += have
    return out
