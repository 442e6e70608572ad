"""The C Huffman lane coder (`_huffman_c.c`, built by `pip install` when a compiler is there): its tables per
code and the calls, byte-identical to the numpy coder in `huffman_lanes`.

Decoding resolves 8-bit symbols' codes of at most PRIM_BITS bits with one lookup; a longer code, and every
16-bit symbol's code, takes its length from the same table (or, where the prefix spans several lengths, the
shortest, and the rest from canonical limits) and the symbol from the canonically sorted symbols: the code
lengths are non-decreasing in the code's left-aligned value, so length l holds the values in
[limit[l-1], limit[l]) and its symbols are a run of the canonical order. That keeps int16's tables at ~100 KiB
(sorted symbols) instead of a 2^max_len table.
"""

from __future__ import annotations

import numpy as np

from geofed.codec.errors import CodecError
from geofed.codec.header import Reader
from geofed.codec.huffman import HuffmanCode
from geofed.codec.huffman_jit import right_aligned_codes

try:
    from geofed.codec import _huffman_c as _ext
except ImportError:  # no compiler at install time: the numba or numpy coder is used
    _ext = None

PRIM_BITS = 11
"""First decode table: 2^11 entries (8 KiB, in L1) indexed by the top 11 stream bits whatever the longest
code (a constant shift in the kernel); int8's codes are mostly shorter. 12 or 13 bits measured no faster on the
real int8 delta (its codes longer than 11 bits are ~1% of symbols); int16's entries give the length for a second
lookup, whatever the width."""


SEARCH16 = 1 << 6
"""16-bit symbols' first-table entry flag: the prefix spans several code lengths (see `_huffman_c.c`)."""
BIAS16 = 1 << 23
"""Added to delta in 16-bit symbols' entries (24 unsigned bits): delta is negative down to -(2^max_len)."""


def built() -> bool:
    return _ext is not None


class CCoder:
    """The C coder's tables for one Huffman code (built once per code, reused for every frame)."""

    def __init__(self, code: HuffmanCode) -> None:
        self.code = code
        self.width = 1 if code.alphabet <= 256 else 2
        max_len = code.max_len
        # enc[s] = code << 8 | length: one 32-bit load per symbol (codes are at most 24 bits)
        right = right_aligned_codes(code).astype(np.uint32)
        self.enc = (right << np.uint32(8)) | code.lengths.astype(np.uint32)
        syms, ls, widths, _ = code._canonical
        self.sorted = syms.astype(np.uint8 if self.width == 1 else np.uint16)
        per_len = np.bincount(ls, minlength=max_len + 1).astype(np.int64)
        limit = np.zeros(max_len + 2, np.int64)  # limit[l]: end of the length-l codes, in max_len-bit units
        limit[1 : max_len + 1] = np.cumsum(per_len[1:] << (max_len - np.arange(1, max_len + 1)))
        limit[max_len + 1] = 0xFFFFFFFF  # sentinel: a value past every code stops the length search
        offset = np.concatenate([[0], np.cumsum(per_len)])[: max_len + 1]  # first canonical index of length l
        delta = np.zeros(max_len + 2, np.int64)
        ln = np.arange(1, max_len + 1)
        delta[1 : max_len + 1] = offset[1:] - (limit[: max_len] >> (max_len - ln))
        self.limit, self.delta = limit.astype(np.uint32), delta.astype(np.int32)
        self.prim_bits = PRIM_BITS
        self.prim = self._first_table(limit, delta, PRIM_BITS)
        # Two extra symbols per 64-bit read pay when 5 codes usually fit in its 57 bits: judged from the code's
        # mean length under the distribution its lengths imply (2^-l each); int8 deltas ~7 bits, int16 ~15.
        used = ls.astype(np.float64)
        self.more = bool(5 * float((used * np.exp2(-used)).sum() / np.exp2(-used).sum()) <= 45)

    def _first_table(self, limit: np.ndarray, delta: np.ndarray, bits: int) -> np.ndarray:
        """Entry per prim_bits prefix (kinds as in `_huffman_c.c`): the symbol when one code covers the
        prefix (8-bit symbols only); else the code length when every code under the prefix has the same one;
        else the shortest. 16-bit symbols: one layout for the first two (most of their codes are longer than
        the table, and a test-free entry measured faster), len in the low 6 bits for the kernel's shifts."""
        max_len = self.code.max_len
        prefix = np.arange(1 << bits, dtype=np.int64)
        if max_len >= bits:  # first and last max_len-bit values under each prefix
            first = prefix << (max_len - bits)
            last = first + (1 << (max_len - bits)) - 1
        else:  # codes shorter than the table: a prefix lies inside one max_len-bit value
            first = last = prefix >> (bits - max_len)
        ends = limit[1 : max_len + 1]
        lo = np.searchsorted(ends, first, side="right") + 1  # max_len + 1: past every code
        hi = np.searchsorted(ends, last, side="right") + 1
        ln = np.minimum(lo, max_len)
        is_direct = lo <= min(bits, max_len)
        sym = self.sorted.astype(np.int64)[np.where(is_direct, (first >> (max_len - ln)) + delta[ln], 0)]
        direct = sym | (lo << 16)
        known = (1 << 31) | lo | ((delta[ln] + (1 << 21)) << 8)
        search = (1 << 31) | (1 << 30) | lo
        fixed = (lo == hi) & (lo <= max_len)  # every code under the prefix has length lo
        if self.width == 2:  # one kind for direct and known: len | (delta + BIAS16) << 8; search: 64 | shortest
            biased = delta[ln] + BIAS16
            fits = fixed & (biased >= 0) & (biased < 1 << 24)  # else (max_len > 23) the search path is exact too
            return np.where(fits, lo | (biased << 8), SEARCH16 | lo).astype(np.uint32)
        out = np.where(is_direct, direct, np.where(fixed, known, search))
        return out.astype(np.uint32)

    def encode(self, syms: np.ndarray, lane_syms: int) -> bytes:
        """The frame body: lane bit lengths, then the MSB-first bitstream."""
        if syms.size == 0:
            raise CodecError("a Huffman frame holds at least one symbol")
        body = _ext.encode(np.ascontiguousarray(syms), self.width, self.enc, lane_syms, self.code.max_len)
        if body is None:
            raise CodecError("a symbol has no Huffman code: the input changed after the histogram pass")
        return body

    def decode(self, r: Reader, count: int, lane_syms: int) -> np.ndarray:
        """`count` symbols from the rest of `r`, with the numpy coder's checks and messages."""
        if count < 1:
            raise CodecError("a Huffman frame holds at least one symbol")
        lanes = -(-count // lane_syms)
        (base,) = r.unpack("<I", "Huffman lane base")
        (lw,) = r.unpack("<B", "Huffman lane width")
        if lw not in (1, 2, 4):
            raise CodecError(f"corrupt Huffman frame: lane-length width {lw} is not 1, 2 or 4 bytes")
        lane_raw = r.take(lw * lanes, "Huffman lane lengths")
        stream = r.rest()
        out = np.empty(count, np.uint8 if self.width == 1 else np.uint16)
        status = _ext.decode(lane_raw, lw, base, stream, count, lane_syms, self.prim, self.prim_bits, self.limit,
                             self.delta, self.sorted, self.code.max_len, out, self.more)
        if status[0] == 1:
            raise CodecError("corrupt Huffman frame: a lane's bit length is impossible for its symbol count")
        if status[0] == 2:
            raise CodecError(f"corrupt Huffman frame: lanes need {status[1]} bytes of bitstream, {len(stream)} came")
        if status[0] == 3:
            raise CodecError(f"corrupt Huffman data: lane {status[1]} decoded to bit {status[2]}, "
                             f"its stored end is bit {status[3]}")
        return out


def coder_for(code: HuffmanCode) -> CCoder:
    """The code's C tables, built on first use and kept on the code object."""
    coder = getattr(code, "_c_coder", None)
    if coder is None:
        coder = code._c_coder = CCoder(code)
    return coder
