"""rANS entropy stage through `constriction` (an alternative to the paper's Huffman, §III-B3).

ANS spends fractional bits per symbol, so it gets within a fraction of a percent of the entropy even when
one quantisation bin holds most of the mass (where Huffman cannot go below 1 bit per symbol). The model is
a categorical distribution over the used symbol range; the header carries its integer weights, and both
ends build `Categorical(weights, perfect=False)` from those same integers, so the models agree exactly.
"""

from __future__ import annotations

import zlib

import constriction
import numpy as np

from geofed.codec.errors import CodecError
from geofed.codec.header import Reader

_MAX_TOTAL = 1 << 31


class AnsModel:
    """Integer symbol weights over [lo, lo + len(weights)) and the constriction model built from them."""

    def __init__(self, lo: int, weights: np.ndarray, alphabet: int) -> None:
        if weights.size < 2 or lo + weights.size > alphabet:
            raise CodecError(f"invalid ANS model range [{lo}, {lo + weights.size}): needs 2+ symbols within {alphabet}")
        if int(weights.sum(dtype=np.uint64)) == 0:
            raise CodecError("ANS model has zero total weight")
        self.lo = lo
        self.weights = weights.astype(np.uint32)
        self.alphabet = alphabet
        try:
            self.model = constriction.stream.model.Categorical(self.weights.astype(np.float64), perfect=False)
        except Exception as exc:
            raise CodecError(f"ANS model rejected by constriction: {exc}") from exc

    @classmethod
    def from_counts(cls, counts: np.ndarray) -> AnsModel:
        """Model for a histogram; counts are scaled into uint32 (keeping every used symbol nonzero)."""
        used = np.flatnonzero(counts)
        if used.size == 0:  # empty input: any valid model will do, no frame uses it
            return cls(0, np.ones(2, np.uint32), counts.size)
        lo, hi = int(used[0]), int(used[-1])
        if lo == hi:  # constriction needs two symbols; the unused one gets its minimum probability
            lo, hi = (lo, hi + 1) if hi + 1 < counts.size else (lo - 1, hi)
        w = counts[lo : hi + 1].astype(np.float64)
        total = w.sum()
        if total >= _MAX_TOTAL:
            w = np.where(w > 0, np.maximum(1.0, np.floor(w * (_MAX_TOTAL / total))), 0.0)
        return cls(lo, w.astype(np.uint32), counts.size)

    def to_bytes(self) -> bytes:
        """u32 lo | u32 n | u32 len(z) | z = zlib(weights as uint32 LE)."""
        z = zlib.compress(self.weights.astype("<u4").tobytes(), 6)
        return np.array([self.lo, self.weights.size, len(z)], dtype="<u4").tobytes() + z

    @classmethod
    def read(cls, r: Reader, alphabet: int) -> AnsModel:
        lo, n, zlen = (int(v) for v in r.array("<u4", 3, "ANS model sizes"))
        if n < 2 or lo + n > alphabet:
            raise CodecError(f"invalid ANS model range [{lo}, {lo + n}): needs 2+ symbols within {alphabet}")
        z = bytes(r.take(zlen, "ANS weights"))
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(z, 4 * n + 1)
        except zlib.error as exc:
            raise CodecError(f"corrupt ANS weight table: {exc}") from exc
        if len(raw) != 4 * n or not inflater.eof:
            raise CodecError(f"ANS weight table must hold exactly {n} weights")
        return cls(lo, np.frombuffer(raw, dtype="<u4").astype(np.uint32), alphabet)

    def encode(self, syms: np.ndarray) -> bytes:
        """One frame's symbols as the coder's compressed uint32 words (little-endian)."""
        rel = syms.astype(np.int32)
        rel -= self.lo
        if rel.size and (rel.min() < 0 or rel.max() >= self.weights.size):
            raise CodecError("a symbol is outside the ANS model: the input changed after the histogram pass")
        coder = constriction.stream.stack.AnsCoder()
        coder.encode_reverse(rel, self.model)
        return coder.get_compressed().astype("<u4").tobytes()

    def max_bytes(self, count: int) -> int:
        """Bound on a frame's size: every symbol costs at most 24 bits at constriction's precision."""
        return 3 * count + 16

    def decode(self, r: Reader, count: int, dtype: np.dtype) -> np.ndarray:
        body = r.rest()
        if len(body) % 4:
            raise CodecError(f"corrupt ANS frame: {len(body)} bytes is not a whole number of 32-bit words")
        words = np.frombuffer(body, dtype="<u4").astype(np.uint32)
        try:
            coder = constriction.stream.stack.AnsCoder(words)
            rel = coder.decode(self.model, count)
            empty = coder.is_empty()
        except Exception as exc:  # constriction reports bad data with assorted exception types
            raise CodecError(f"corrupt ANS frame: {exc}") from exc
        if not empty:
            raise CodecError("corrupt ANS frame: data left over after decoding all of the frame's symbols")
        rel += self.lo
        return rel.astype(dtype)
