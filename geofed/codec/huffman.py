"""Length-limited canonical Huffman codes (paper §III-B3: Huffman coding of the quantised symbols).

Lengths come from the package-merge algorithm (optimal under a maximum length), so the decoder's lookup
table stays at 2^max_len entries even for int16's 65536-symbol alphabet. Codes are canonical: only the
lengths travel in the header, and both ends rebuild identical codes from them. Construction works per
alphabet (at most 65536 symbols), never per element.
"""

from __future__ import annotations

import zlib
from functools import cached_property

import numpy as np

from geofed.codec.errors import CodecError
from geofed.codec.header import Reader

LENGTH_LIMIT = {8: 16, 16: 20}
"""Longest code per symbol width: 16 lets int8 code symbol pairs in one 32-bit item; 20 keeps int16's
decode table at 1 Mi entries. The lane decoder reads a 25-bit window, so 24 is the hard ceiling."""


def code_lengths(counts: np.ndarray, limit: int) -> np.ndarray:
    """Optimal code lengths (uint8, 0 = unused) for symbol `counts` with no code longer than `limit`.

    Package-merge (Larmore & Hirschberg 1990): at each of `limit` levels, merge the sorted leaf weights
    with pairwise packages of the level below; the cheapest 2n-2 items at the top level fix the lengths.
    """
    counts = np.asarray(counts, dtype=np.int64)
    out = np.zeros(counts.size, dtype=np.uint8)
    used = np.flatnonzero(counts > 0)
    n = used.size
    if n == 0:
        return out
    if n == 1:
        out[used] = 1
        return out
    if n > (1 << limit):
        raise CodecError(f"{n} symbols cannot have codes of at most {limit} bits")
    order = np.argsort(counts[used], kind="stable")
    leaves = counts[used][order]
    keep = 2 * n - 2  # no level ever selects more items than this
    flags: list[np.ndarray] = [np.zeros(0, bool)] * (limit + 1)
    cur = leaves
    flags[limit] = np.ones(n, dtype=bool)
    is_leaf = np.concatenate([np.ones(n, dtype=bool), np.zeros(keep, dtype=bool)])
    for depth in range(limit - 1, 0, -1):
        k = cur.size // 2
        merged = np.concatenate([leaves, cur[0 : 2 * k : 2] + cur[1 : 2 * k : 2]])
        ordr = np.argsort(merged, kind="stable")[:keep]  # stable: leaves win ties
        cur = merged[ordr]
        flags[depth] = is_leaf[: n + k][ordr]
    lengths = np.zeros(n, dtype=np.int64)
    take = keep
    for depth in range(1, limit + 1):
        n_leaf = int(np.count_nonzero(flags[depth][:take]))
        lengths[:n_leaf] += 1  # the lightest leaves are selected at the most levels
        take = 2 * (take - n_leaf)
        if take == 0:
            break
    out[used[order]] = lengths
    return out


class HuffmanCode:
    """A canonical prefix code built from per-symbol lengths, with encode and lookup-decode tables.

    Canonical order is (length, symbol); codes are assigned consecutively, so each code's decode-table
    entries are one contiguous run and the tables come out of a single `np.repeat`.
    """

    def __init__(self, lengths: np.ndarray, limit: int) -> None:
        lengths = np.asarray(lengths)
        if lengths.ndim != 1:
            raise CodecError("Huffman code lengths must be a 1-D table")
        too_long = int(lengths.max(initial=0))
        if too_long > limit:
            raise CodecError(f"invalid Huffman code lengths: length {too_long} exceeds the limit {limit}")
        syms = np.flatnonzero(lengths)
        if syms.size == 0:
            raise CodecError("invalid Huffman code lengths: no symbol has a code")
        ls = lengths[syms].astype(np.int64)
        order = np.lexsort((syms, ls))
        syms, ls = syms[order], ls[order]
        self.max_len = int(ls[-1])
        widths = np.left_shift(np.int64(1), self.max_len - ls)
        kraft = int(widths.sum())
        if kraft > (1 << self.max_len):
            raise CodecError(f"invalid Huffman code lengths: Kraft sum {kraft / (1 << self.max_len):.6f} exceeds 1")
        codes = (np.cumsum(widths) - widths) >> (self.max_len - ls)
        self.alphabet = lengths.size
        self.lengths = lengths.astype(np.uint8)
        sym_dtype = np.uint8 if self.alphabet <= 256 else np.uint16
        # Left-aligned in 64 bits: an item's bits start at the word's MSB, ready for a right shift.
        self.aligned = np.zeros(self.alphabet, dtype=np.uint64)
        self.aligned[syms] = codes.astype(np.uint64) << (64 - ls).astype(np.uint64)
        self._canonical = (syms.astype(sym_dtype), ls.astype(np.uint8), widths, kraft)

    @cached_property
    def decode_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """(symbol, length) for every max_len-bit window; length 0 marks a window no code matches."""
        syms, ls, widths, kraft = self._canonical
        dec_sym = np.zeros(1 << self.max_len, dtype=syms.dtype)
        dec_len = np.zeros(1 << self.max_len, dtype=np.uint8)
        dec_sym[:kraft] = np.repeat(syms, widths)
        dec_len[:kraft] = np.repeat(ls, widths)
        return dec_sym, dec_len

    @cached_property
    def pair_tables(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Codes for every byte pair, keyed by the pair's native uint16 view: halves int8's encode work.
        None unless int8 codes fit 16 bits, so a pair fits one 32-bit item."""
        if self.alphabet != 256 or self.max_len > 16:
            return None
        pairs = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)
        s0, s1 = pairs[:, 0], pairs[:, 1]
        l0, l1 = self.lengths[s0], self.lengths[s1]
        aligned = self.aligned[s0] | (self.aligned[s1] >> l0.astype(np.uint64))
        plen = np.where((l0 > 0) & (l1 > 0), l0.astype(np.uint8) + l1, 0).astype(np.uint8)
        return aligned, plen

    def to_bytes(self) -> bytes:
        """u8 max_len | u32 len(z) | z = zlib(lengths as uint8)."""
        z = zlib.compress(self.lengths.tobytes(), 6)
        return np.uint8(self.max_len).tobytes() + np.uint32(len(z)).astype("<u4").tobytes() + z

    @classmethod
    def read(cls, r: Reader, alphabet: int, limit: int) -> HuffmanCode:
        """Parse and validate a code table; the zlib stream may not inflate past `alphabet` bytes."""
        (max_len,) = r.unpack("<B", "Huffman max length")
        (zlen,) = r.unpack("<I", "Huffman table length")
        z = bytes(r.take(zlen, "Huffman code lengths"))
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(z, alphabet + 1)
        except zlib.error as exc:
            raise CodecError(f"corrupt Huffman code-length table: {exc}") from exc
        if len(raw) != alphabet or not inflater.eof or inflater.unconsumed_tail:
            raise CodecError(f"Huffman code-length table must hold exactly {alphabet} lengths")
        code = cls(np.frombuffer(raw, dtype=np.uint8), limit)
        if code.max_len != max_len:
            raise CodecError(f"Huffman header says max length {max_len}, table has {code.max_len}")
        return code
