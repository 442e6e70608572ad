"""Min-max quantisation of a flattened delta to 8 or 16 bits (paper §III-B3).

One global [min, max] over the whole flattened vector is the paper's choice; optional per-block ranges
(`block` elements each) bound the damage a single heavy-tailed outlier does to everyone else's step.
Symbols are unsigned: q = rint((x - lo) / step), x̂ = lo + q * step, step = (hi - lo) / (2^bits - 1),
so |x - x̂| <= step / 2 up to float32 rounding. Both are computed around the midpoint,
q = rint((x - mid) / step + c) and x̂ = mid + (q - c) * step with c = (2^bits - 1) / 2, so no
intermediate exceeds (hi - lo) / 2 and even a range of ±3e38 cannot overflow float32. A range too
narrow for a normal float32 step (hi - lo < ~3e-36) decodes every element to mid. Encoder and
decoder derive (mid, step) from the same stored float32 (lo, hi) with the same function.
"""

from __future__ import annotations

import numpy as np

from geofed.codec.errors import CodecError

BITS = {"int8": 8, "int16": 16}
MIN_BLOCK = 64
"""Smallest per-block range: below this the 8 bytes of (lo, hi) per block cost over 1 bit per element."""

_TINY = np.finfo(np.float32).tiny


def qmax(bits: int) -> int:
    return (1 << bits) - 1


def symbol_dtype(bits: int) -> np.dtype:
    return np.dtype(np.uint8 if bits == 8 else np.uint16)


def global_range(flat: np.ndarray) -> tuple[np.float32, np.float32]:
    """(min, max) of the whole vector; rejects NaN/Inf, which min-max quantisation cannot represent."""
    if flat.size == 0:
        return np.float32(0), np.float32(0)
    lo, hi = np.float32(flat.min()), np.float32(flat.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise CodecError("input contains non-finite values (NaN/Inf); min-max quantisation needs finite data")
    return lo, hi


def block_ranges(flat: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-block (min, max) as float32 arrays; reductions over views, so no copy of `flat`."""
    n = flat.size
    full = n // block
    head = flat[: full * block].reshape(full, block)
    lo = [head.min(axis=1)] if full else []
    hi = [head.max(axis=1)] if full else []
    if n % block:
        lo.append(flat[full * block :].min(keepdims=True))
        hi.append(flat[full * block :].max(keepdims=True))
    lo_a = np.concatenate(lo).astype(np.float32) if lo else np.zeros(0, np.float32)
    hi_a = np.concatenate(hi).astype(np.float32) if hi else np.zeros(0, np.float32)
    if not (np.isfinite(lo_a).all() and np.isfinite(hi_a).all()):
        raise CodecError("input contains non-finite values (NaN/Inf); min-max quantisation needs finite data")
    return lo_a, hi_a


def check_ranges(lo: np.ndarray, hi: np.ndarray, where: str) -> None:
    """Decoder-side validation of stored ranges: finite and ordered."""
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise CodecError(f"non-finite min/max in {where}")
    if (lo > hi).any():
        raise CodecError(f"min greater than max in {where}")


def steps(lo: np.ndarray, hi: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mid, step, 1/step) as float32, computed in float64 so ranges near float32's limit are fine."""
    lo64, hi64 = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    mid = (0.5 * (lo64 + hi64)).astype(np.float32)
    step = ((hi64 - lo64) / qmax(bits)).astype(np.float32)
    step64 = step.astype(np.float64)
    inv = np.where(step64 >= _TINY, 1.0 / np.maximum(step64, _TINY), 0.0).astype(np.float32)
    return mid, step, inv


def block_span(a: int, b: int, block: int) -> tuple[int, int]:
    """Indices [first, stop) of the blocks that overlap elements [a, b)."""
    return a // block, -(-b // block)


def per_element(values: np.ndarray, a: int, b: int, block: int) -> np.ndarray:
    """Repeat per-block `values` (for blocks block_span(a, b)) over the elements [a, b) they cover."""
    first, stop = block_span(a, b, block)
    edges = np.arange(first, stop + 1, dtype=np.int64) * block
    edges[0], edges[-1] = a, b
    return np.repeat(values, np.diff(edges))


def quantize_into(
    x: np.ndarray,
    mid: np.ndarray | np.float32,
    inv: np.ndarray | np.float32,
    bits: int,
    scratch: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    """Symbols of `x` into `out` (uint8/uint16), using `scratch` (float32, same length) as workspace."""
    np.subtract(x, mid, out=scratch)
    np.multiply(scratch, inv, out=scratch)
    np.add(scratch, np.float32(qmax(bits) / 2), out=scratch)
    np.rint(scratch, out=scratch)
    np.clip(scratch, 0, qmax(bits), out=scratch)
    np.copyto(out, scratch, casting="unsafe")
    return out


def add_histogram(counts: np.ndarray, q: np.ndarray) -> None:
    """counts += histogram of symbols `q`; bytes are counted in pairs (one uint16 view), which halves
    bincount's work, then folded back: each pair adds one count to each of its two symbols."""
    if q.dtype != np.uint8 or q.size < 2:
        counts += np.bincount(q, minlength=counts.size)
        return
    even = q.size & ~1
    pairs = np.bincount(q[:even].view(np.uint16), minlength=1 << 16).reshape(256, 256)
    counts += pairs.sum(axis=0) + pairs.sum(axis=1)
    if q.size & 1:
        counts[q[-1]] += 1


def dequantize_into(
    q: np.ndarray, mid: np.ndarray | np.float32, step: np.ndarray | np.float32, bits: int, out: np.ndarray
) -> np.ndarray:
    """x̂ = mid + (q - c) * step into the float32 array `out`."""
    np.subtract(q, np.float32(qmax(bits) / 2), out=out)
    np.multiply(out, step, out=out)
    np.add(out, mid, out=out)
    return out
