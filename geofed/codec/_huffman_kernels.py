"""numba kernels of the compiled Huffman coder (see `huffman_jit`); imported on first use only, so a
process that never entropy-codes (a rejoining client's first step) does not pay numba's import."""

from __future__ import annotations

import numpy as np

from geofed.codec.numba_jit import cached_njit

_U = np.uint64


@cached_njit(nogil=True, boundscheck=False)
def _encode(syms, codes, lens, pair_codes, pair_lens, lane_syms, words, lane_bits):  # pragma: no cover
    """MSB-first bitstream as 32-bit words; per-lane bit counts. Returns bits written, -1: no code.

    With `pair_codes` (int8 alphabets whose codes fit 16 bits) two symbols are looked up at once. The bit
    writer is spelled out in both loops: a shared helper costs 3x in numba's code here."""
    acc = _U(0)
    nacc = 0
    wi = 0
    total = 0
    n = syms.size
    pairs = pair_codes.size > 0
    lanes = (n + lane_syms - 1) // lane_syms
    for lane in range(lanes):
        lo = lane * lane_syms
        hi = min(n, lo + lane_syms)
        lane_start = total
        i = lo
        if pairs:
            while i + 1 < hi:
                key = np.int64(syms[i]) | (np.int64(syms[i + 1]) << 8)
                ln = np.int64(pair_lens[key])
                if ln == 0:
                    return -1
                acc = (acc << _U(ln)) | pair_codes[key]
                nacc += ln
                total += ln
                if nacc >= 32:
                    nacc -= 32
                    words[wi] = np.uint32((acc >> _U(nacc)) & _U(0xFFFFFFFF))
                    wi += 1
                i += 2
        while i < hi:
            s = syms[i]
            ln = np.int64(lens[s])
            if ln == 0:
                return -1
            acc = (acc << _U(ln)) | codes[s]
            nacc += ln
            total += ln
            if nacc >= 32:
                nacc -= 32
                words[wi] = np.uint32((acc >> _U(nacc)) & _U(0xFFFFFFFF))
                wi += 1
            i += 1
        lane_bits[lane] = total - lane_start
    if nacc:
        words[wi] = np.uint32((acc << _U(32 - nacc)) & _U(0xFFFFFFFF))
    return total

@cached_njit(nogil=True, boundscheck=False, inline="always")
def _bits64(words, p):  # pragma: no cover - compiled
    """The 64 bits of the stream starting at bit `p` (words: big-endian 64-bit words, zero-padded)."""
    q = p >> 6
    off = _U(p & 63)
    return (words[q] << off) | ((words[q + 1] >> _U(1)) >> (_U(63) - off))

@cached_njit(nogil=True, inline="always", boundscheck=False)
def _one(w, fast, fast_bits, dec_sym, dec_len, max_len):  # pragma: no cover - compiled
    """(symbol, length) of the code at the top of `w`: a small table first, the full one for long codes."""
    e = fast[w >> _U(64 - fast_bits)]
    if e >= 0:
        return e & 0xFFFF, e >> 16
    i = w >> _U(64 - max_len)
    return np.int64(dec_sym[i]), np.int64(dec_len[i])

@cached_njit(nogil=True, boundscheck=False)
def _decode(words, starts, counts, lane_syms, fast, fast_bits, dec_sym, dec_len, max_len, per_fill, out,
            ends):  # pragma: no cover - compiled
    """Decode every lane into `out` (stream order) and each lane's final bit into `ends`; four lanes at
    a time, `per_fill` symbols per 64-bit read (64 // max_len: no read runs dry)."""
    lanes = starts.size
    g = 0
    while g + 4 <= lanes and counts[g + 3] == lane_syms:
        p0, p1, p2, p3 = starts[g], starts[g + 1], starts[g + 2], starts[g + 3]
        o0, o1, o2, o3 = g * lane_syms, (g + 1) * lane_syms, (g + 2) * lane_syms, (g + 3) * lane_syms
        j = 0
        while j < lane_syms:
            w0, w1, w2, w3 = _bits64(words, p0), _bits64(words, p1), _bits64(words, p2), _bits64(words, p3)
            for _ in range(min(per_fill, lane_syms - j)):
                s0, l0 = _one(w0, fast, fast_bits, dec_sym, dec_len, max_len)
                s1, l1 = _one(w1, fast, fast_bits, dec_sym, dec_len, max_len)
                s2, l2 = _one(w2, fast, fast_bits, dec_sym, dec_len, max_len)
                s3, l3 = _one(w3, fast, fast_bits, dec_sym, dec_len, max_len)
                out[o0 + j], out[o1 + j], out[o2 + j], out[o3 + j] = s0, s1, s2, s3
                w0, w1, w2, w3 = w0 << _U(l0), w1 << _U(l1), w2 << _U(l2), w3 << _U(l3)
                p0, p1, p2, p3 = p0 + l0, p1 + l1, p2 + l2, p3 + l3
                j += 1
        ends[g], ends[g + 1], ends[g + 2], ends[g + 3] = p0, p1, p2, p3
        g += 4
    for lane in range(g, lanes):
        p = starts[lane]
        o = lane * lane_syms
        j = 0
        while j < counts[lane]:
            w = _bits64(words, p)
            for _ in range(min(per_fill, counts[lane] - j)):
                s, ln = _one(w, fast, fast_bits, dec_sym, dec_len, max_len)
                out[o + j] = s
                w = w << _U(ln)
                p += ln
                j += 1
        ends[lane] = p


@cached_njit(nogil=True, boundscheck=False)
def _decode_pairs(words, starts, counts, lane_syms, fast2, fast_bits, dec_sym, dec_len, max_len, per_fill,
                  out, ends):  # pragma: no cover - compiled
    """`_decode` for byte alphabets with a two-symbol first-level table: entry = n | len << 2 | s0 << 8 |
    s1 << 16 (n: symbols decoded, 0 = a code longer than the table). Lanes run four at a time while
    at least 2 * per_fill symbols are left in them; the rest goes one symbol per step."""
    lanes = starts.size
    top = _U(64 - fast_bits)
    g = 0
    while g + 4 <= lanes and counts[g + 3] == lane_syms:
        p = np.empty(4, np.int64)
        j = np.zeros(4, np.int64)
        for k in range(4):
            p[k] = starts[g + k]
        p0, p1, p2, p3 = p[0], p[1], p[2], p[3]
        j0 = j1 = j2 = j3 = 0
        o0, o1, o2, o3 = g * lane_syms, (g + 1) * lane_syms, (g + 2) * lane_syms, (g + 3) * lane_syms
        stop = lane_syms - 2 * per_fill
        while j0 <= stop and j1 <= stop and j2 <= stop and j3 <= stop:
            w0, w1, w2, w3 = _bits64(words, p0), _bits64(words, p1), _bits64(words, p2), _bits64(words, p3)
            for _ in range(per_fill):
                e0, e1, e2, e3 = fast2[w0 >> top], fast2[w1 >> top], fast2[w2 >> top], fast2[w3 >> top]
                if e0 & 3 == 0:
                    i = w0 >> _U(64 - max_len)
                    e0 = 1 | (np.int64(dec_len[i]) << 2) | (np.int64(dec_sym[i]) << 8)
                if e1 & 3 == 0:
                    i = w1 >> _U(64 - max_len)
                    e1 = 1 | (np.int64(dec_len[i]) << 2) | (np.int64(dec_sym[i]) << 8)
                if e2 & 3 == 0:
                    i = w2 >> _U(64 - max_len)
                    e2 = 1 | (np.int64(dec_len[i]) << 2) | (np.int64(dec_sym[i]) << 8)
                if e3 & 3 == 0:
                    i = w3 >> _U(64 - max_len)
                    e3 = 1 | (np.int64(dec_len[i]) << 2) | (np.int64(dec_sym[i]) << 8)
                out[o0 + j0], out[o0 + j0 + 1] = (e0 >> 8) & 0xFF, (e0 >> 16) & 0xFF
                out[o1 + j1], out[o1 + j1 + 1] = (e1 >> 8) & 0xFF, (e1 >> 16) & 0xFF
                out[o2 + j2], out[o2 + j2 + 1] = (e2 >> 8) & 0xFF, (e2 >> 16) & 0xFF
                out[o3 + j3], out[o3 + j3 + 1] = (e3 >> 8) & 0xFF, (e3 >> 16) & 0xFF
                l0, l1, l2, l3 = (e0 >> 2) & 63, (e1 >> 2) & 63, (e2 >> 2) & 63, (e3 >> 2) & 63
                w0, w1, w2, w3 = w0 << _U(l0), w1 << _U(l1), w2 << _U(l2), w3 << _U(l3)
                p0, p1, p2, p3 = p0 + l0, p1 + l1, p2 + l2, p3 + l3
                j0, j1, j2, j3 = j0 + (e0 & 3), j1 + (e1 & 3), j2 + (e2 & 3), j3 + (e3 & 3)
        p[0], p[1], p[2], p[3] = p0, p1, p2, p3
        j[0], j[1], j[2], j[3] = j0, j1, j2, j3
        for k in range(4):
            pk, jk, o = p[k], j[k], (g + k) * lane_syms
            while jk < lane_syms:
                w = _bits64(words, pk)
                i = w >> _U(64 - max_len)
                out[o + jk] = dec_sym[i]
                pk += np.int64(dec_len[i])
                jk += 1
            ends[g + k] = pk
        g += 4
    for lane in range(g, lanes):
        pk = starts[lane]
        o = lane * lane_syms
        for jk in range(counts[lane]):
            w = _bits64(words, pk)
            i = w >> _U(64 - max_len)
            out[o + jk] = dec_sym[i]
            pk += np.int64(dec_len[i])
        ends[lane] = pk
