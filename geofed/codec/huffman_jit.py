"""Compiled Huffman lane coding (numba), byte-identical to the numpy lane coder in `huffman_lanes`.

The numpy coder works in whole-array passes (a prefix sum and an OR-reduce to encode, one numpy step
per symbol position across all lanes to decode); here each symbol costs a handful of machine
instructions instead. Encoding is one MSB-first bit writer over the frame, int8 symbols two at a time
through the code's pair table; decoding walks four lanes at once from their stored starts (their lookups
overlap), reads 64 stream bits per lane per refill, and takes up to two byte symbols per lookup from a
2^11-entry table that stays in L1. Corrupt input is caught
the same way as in numpy: a lane that does not end exactly on its stored boundary.

numba compiles on first use and caches the machine code next to this file (or in numba's user cache
when that is read-only). Which lane coder runs (the C coder of `huffman_c` first, then this one, then numpy) is
`huffman_backend`'s choice; `enabled()` stays the switch for the other numba passes (`GEOFED_HUFFMAN=numpy`
turns them off too).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np


def _numba_present() -> bool:
    return importlib.util.find_spec("numba") is not None


def enabled() -> bool:
    """True when the compiled coder is used (numba installed and not switched off)."""
    return _NUMBA and os.environ.get("GEOFED_HUFFMAN", "") != "numpy"


_NUMBA = _numba_present()


FAST_BITS = 10
"""First-level decode table: 2^10 entries (8 KiB, stays in L1); longer codes go to the full table."""
PAIR_BITS = 11
"""Byte alphabets: a 2^11-entry table that decodes up to two symbols per lookup (16 KiB)."""


def _pair_table(dec_sym: np.ndarray, dec_len: np.ndarray, max_len: int, bits: int) -> np.ndarray:
    """Entry per `bits`-bit window: n | len << 2 | s0 << 8 | s1 << 16 for the n (0-2) whole codes in it."""
    idx = np.arange(1 << bits, dtype=np.int64)
    pad = max_len - bits
    l0 = dec_len[idx << pad].astype(np.int64)
    s0 = dec_sym[idx << pad].astype(np.int64)
    ok0 = (l0 > 0) & (l0 <= bits)
    rest = (idx << np.minimum(l0, bits)) & ((1 << bits) - 1)
    l1 = dec_len[rest << pad].astype(np.int64)
    s1 = dec_sym[rest << pad].astype(np.int64)
    ok1 = ok0 & (l1 > 0) & (l0 + l1 <= bits)
    n = ok0.astype(np.int64) + ok1
    length = np.where(ok1, l0 + l1, np.where(ok0, l0, 0))
    return np.where(n > 0, n | (length << 2) | (s0 << 8) | (np.where(ok1, s1, 0) << 16), 0).astype(np.int64)


def right_aligned_codes(code) -> np.ndarray:
    """Each symbol's code as a right-aligned integer (0 for symbols without a code)."""
    return _right_aligned(code.aligned, code.lengths)


def _right_aligned(aligned: np.ndarray, lens: np.ndarray) -> np.ndarray:
    lens = lens.astype(np.uint64)
    shift = np.where(lens > 0, np.uint64(64) - lens, np.uint64(0))
    return np.where(lens > 0, aligned >> shift, np.uint64(0)).astype(np.uint64)


class CompiledCoder:
    """The compiled coder's tables for one Huffman code (built once per code, reused for every frame)."""

    def __init__(self, code) -> None:
        self.code = code
        self.codes, self.lens = right_aligned_codes(code), code.lengths.astype(np.int64)
        pair = code.pair_tables
        if pair is not None:
            self.pair_codes, self.pair_lens = _right_aligned(pair[0], pair[1]), pair[1].astype(np.int64)
        else:
            self.pair_codes, self.pair_lens = np.zeros(0, np.uint64), np.zeros(0, np.int64)
        dec_sym, dec_len = code.decode_tables
        fast_bits = min(FAST_BITS, code.max_len)
        # fast[i] = length << 16 | symbol for codes of at most fast_bits bits, -1 for longer ones
        top = np.arange(1 << fast_bits) << (code.max_len - fast_bits)
        fl = dec_len[top].astype(np.int64)
        self.fast = np.where((fl > 0) & (fl <= fast_bits), (fl << 16) | dec_sym[top].astype(np.int64), -1)
        self.fast_bits = fast_bits
        self.fast2 = _pair_table(dec_sym, dec_len, code.max_len, min(PAIR_BITS, code.max_len)) \
            if code.alphabet <= 256 else None

    def encode(self, syms: np.ndarray, lane_syms: int) -> tuple[np.ndarray, bytes] | None:
        """(lane bit lengths, bitstream bytes) of one frame; None when a symbol has no code."""
        lanes = -(-syms.size // lane_syms)
        words = np.zeros(-(-syms.size * self.code.max_len // 32) + 2, dtype=np.uint32)
        lane_bits = np.empty(lanes, dtype=np.int64)
        k = _kernels()
        total = k._encode(syms, self.codes, self.lens, self.pair_codes, self.pair_lens, lane_syms, words, lane_bits)
        if total < 0:
            return None
        if np.little_endian:
            words.byteswap(inplace=True)  # the stream is big-endian words
        return lane_bits.astype(np.uint32), words.view(np.uint8)[: -(-total // 8)].tobytes()

    def decode(self, stream: memoryview, starts: np.ndarray, counts: np.ndarray, lane_syms: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """(symbols in stream order, each lane's end bit) for validated lane starts and counts."""
        code = self.code
        dec_sym, dec_len = code.decode_tables
        # A corrupt lane reads at most lane_syms * max_len bits past its start, plus two 64-bit words.
        n_words = -(-(len(stream) + (lane_syms * code.max_len) // 8) // 8) + 2
        padded = np.zeros(n_words * 8, dtype=np.uint8)
        padded[: len(stream)] = np.frombuffer(stream, dtype=np.uint8)
        words = padded.view(np.uint64)
        if words.dtype.byteorder == "=" and np.little_endian:
            words.byteswap(inplace=True)  # big-endian stream words, read as native integers
        out = np.empty(int(counts.sum()), dtype=dec_sym.dtype)
        ends = np.empty(starts.size, dtype=np.int64)
        k = _kernels()
        if self.fast2 is not None:
            k._decode_pairs(words, starts.astype(np.int64), counts.astype(np.int64), lane_syms, self.fast2,
                            min(PAIR_BITS, code.max_len), dec_sym, dec_len, code.max_len, 64 // code.max_len, out, ends)
        else:
            k._decode(words, starts.astype(np.int64), counts.astype(np.int64), lane_syms, self.fast, self.fast_bits,
                      dec_sym, dec_len, code.max_len, 64 // code.max_len, out, ends)
        return out, ends


def coder_for(code) -> CompiledCoder:
    """The code's compiled tables, built on first use and kept on the code object."""
    coder = getattr(code, "_compiled", None)
    if coder is None:
        coder = code._compiled = CompiledCoder(code)
    return coder


def _kernels():
    from geofed.codec import _huffman_kernels

    return _huffman_kernels
