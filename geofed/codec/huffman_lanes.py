"""Vectorised Huffman encode/decode of one frame, split into independent lanes.

Encode: look up each symbol's left-aligned code, prefix-sum the lengths into bit offsets, shift every
code to its place inside a 64-bit window starting at its 32-bit word, and OR-reduce the windows per word
(codes never overlap, so OR is exact). int8 codes symbol pairs through a 65536-entry table, halving the
work. Decode: the frame's symbols are cut into lanes of `lane_syms`; each lane's bit length is stored
(as an offset from the shortest lane, usually one byte), so all lanes decode in lock-step, one symbol
per lane per numpy step (peek a 25-bit window, look it up in a 2^max_len table, advance). A lane that
does not end exactly on its stored boundary means corrupt data.

This numpy coder is the reference and the last fallback; the C coder (`huffman_c`) and the numba coder
(`huffman_jit`) write the same bytes, and `huffman_backend` picks the first one present.
"""

from __future__ import annotations

import sys

import numpy as np

from geofed.codec import huffman_backend, huffman_c, huffman_jit
from geofed.codec.errors import CodecError
from geofed.codec.header import Reader
from geofed.codec.huffman import HuffmanCode

TARGET_LANES = 2048
"""Lanes per full frame: more lanes = fewer numpy steps, but each costs a stored length (~1 byte)."""


def lane_syms_for(frame_elems: int) -> int:
    """Symbols per lane for a frame size (even, so int8 pairs never straddle a lane)."""
    k = max(64, -(-frame_elems // TARGET_LANES))
    return k + (k & 1)


_WIDTHS = {1: "<u1", 2: "<u2", 4: "<u4"}


def max_body_bytes(count: int, lane_syms: int, max_len: int) -> int:
    lanes = -(-count // lane_syms)
    return 5 + 4 * lanes + -(-count * max_len // 8)


def pack_lane_bits(lane_bits: np.ndarray) -> bytes:
    """u32 min | u8 width | (bits - min) as width-byte ints: lanes vary little, so usually 1 byte each."""
    base = int(lane_bits.min())
    spread = int(lane_bits.max()) - base
    width = 1 if spread < 1 << 8 else 2 if spread < 1 << 16 else 4
    head = np.uint32(base).astype("<u4").tobytes() + bytes([width])
    return head + (lane_bits - np.uint32(base)).astype(_WIDTHS[width]).tobytes()


def read_lane_bits(r: Reader, lanes: int) -> np.ndarray:
    base = int(r.array("<u4", 1, "Huffman lane base")[0])
    (width,) = r.unpack("<B", "Huffman lane width")
    if width not in _WIDTHS:
        raise CodecError(f"corrupt Huffman frame: lane-length width {width} is not 1, 2 or 4 bytes")
    return r.array(_WIDTHS[width], lanes, "Huffman lane lengths").astype(np.int64) + base


class LaneEncoder:
    """Encodes frames of at most `max_syms` symbols, reusing its work arrays between frames."""

    def __init__(self, code: HuffmanCode, lane_syms: int, max_syms: int) -> None:
        self.code = code
        self.lane_syms = lane_syms
        self.coder = huffman_backend.backend()
        self.compiled = self.coder != "numpy"
        if self.compiled:  # the compiled coders need no work arrays
            self._coder = (huffman_c if self.coder == "c" else huffman_jit).coder_for(code)
            return
        self.pairs = code.pair_tables is not None and lane_syms % 2 == 0
        items = -(-max_syms // 2) if self.pairs else max_syms
        self._a = np.empty(items, np.uint64)
        self._l = np.empty(items, np.uint8)
        self._e = np.empty(items, np.uint32)
        self._s = np.empty(items, np.uint32)
        self._t = np.empty(items, np.uint32)
        self._b = np.empty(items, bool)

    def encode(self, syms: np.ndarray) -> bytes:
        """Lane bit lengths followed by the MSB-first bitstream of one frame's symbols."""
        if self.coder == "c":
            return self._coder.encode(syms, self.lane_syms)
        if self.compiled:
            done = self._coder.encode(syms, self.lane_syms)
            if done is None:
                raise CodecError("a symbol has no Huffman code: the input changed after the histogram pass")
            return pack_lane_bits(done[0]) + done[1]
        n = syms.size
        if self.pairs:
            n2 = n // 2
            items, per_lane = n2 + (n & 1), self.lane_syms // 2
            keys = syms[: 2 * n2].view(np.uint16)
            a, ln = self._a[:items], self._l[:items]
            pair_aligned, pair_len = self.code.pair_tables
            np.take(pair_aligned, keys, out=a[:n2])
            np.take(pair_len, keys, out=ln[:n2])
            if n & 1:
                a[n2], ln[n2] = self.code.aligned[syms[-1]], self.code.lengths[syms[-1]]
        else:
            items, per_lane = n, self.lane_syms
            a, ln = self._a[:items], self._l[:items]
            np.take(self.code.aligned, syms, out=a)
            np.take(self.code.lengths, syms, out=ln)
        if ln.min() == 0:
            raise CodecError("a symbol has no Huffman code: the input changed after the histogram pass")
        ends, starts, tmp = self._e[:items], self._s[:items], self._t[:items]
        np.cumsum(ln, dtype=np.uint32, out=ends)
        np.subtract(ends, ln, out=starts)
        np.bitwise_and(starts, 31, out=tmp)
        np.right_shift(a, tmp, out=a)  # each item now sits at its offset inside a 64-bit window
        np.right_shift(starts, 5, out=tmp)  # ...which starts at 32-bit word `tmp`
        new_word = self._b[:items]
        new_word[0] = True
        np.not_equal(tmp[1:], tmp[:-1], out=new_word[1:])
        windows = np.bitwise_or.reduceat(a, np.flatnonzero(new_word))
        words = np.zeros(windows.size + 1, dtype=np.uint32)
        words[:-1] = windows >> np.uint64(32)
        words[1:] |= (windows & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        total = int(ends[-1])
        lane_ends = ends[per_lane - 1 :: per_lane]
        if items % per_lane:
            lane_ends = np.append(lane_ends, ends[-1])
        lane_bits = np.diff(lane_ends, prepend=np.uint32(0))
        return pack_lane_bits(lane_bits) + words.astype(">u4").tobytes()[: -(-total // 8)]


def decode_lanes(code: HuffmanCode, r: Reader, count: int, lane_syms: int) -> np.ndarray:
    """Decode `count` symbols from the rest of `r` (lane lengths, then the bitstream)."""
    coder = huffman_backend.backend()
    if coder == "c":  # parses and checks the lane lengths itself (same checks, same messages)
        return huffman_c.coder_for(code).decode(r, count, lane_syms)
    lanes = -(-count // lane_syms)
    lane_bits = read_lane_bits(r, lanes)
    counts = np.full(lanes, lane_syms, dtype=np.int64)
    counts[-1] = count - lane_syms * (lanes - 1)
    if (lane_bits > counts * code.max_len).any() or (lane_bits < counts).any():
        raise CodecError("corrupt Huffman frame: a lane's bit length is impossible for its symbol count")
    total = int(lane_bits.sum())
    stream = r.rest()
    need = -(-total // 8)
    if len(stream) != need:
        raise CodecError(f"corrupt Huffman frame: lanes need {need} bytes of bitstream, {len(stream)} came")
    starts = (np.cumsum(lane_bits) - lane_bits).astype(np.uint32)
    if coder == "numba":
        out, ends = huffman_jit.coder_for(code).decode(stream, starts, counts, lane_syms)
        _check_lane_ends(ends, starts, lane_bits)
        return out
    # Every lane reads at most lane_syms * max_len bits past its start, plus a 4-byte window.
    buf = np.zeros(len(stream) + (lane_syms * code.max_len) // 8 + 8, dtype=np.uint32)
    buf[: len(stream)] = np.frombuffer(stream, dtype=np.uint8)
    window = (buf[:-3] << 24) | (buf[1:-2] << 16) | (buf[2:-1] << 8) | buf[3:]
    steps = lane_syms if lanes > 1 else count
    dec_sym, dec_len = code.decode_tables
    out = np.empty((steps, lanes), dtype=dec_sym.dtype)
    pos = starts.copy()
    idx, shift, step_len = np.empty(lanes, np.uint32), np.empty(lanes, np.uint32), np.empty(lanes, np.uint8)
    last_stop, last_end = int(counts[-1]), None
    drop = np.uint32(32 - code.max_len)
    take_window, take_sym, take_len = window.take, dec_sym.take, dec_len.take
    for k in range(steps):  # one symbol per lane per step: ~8 numpy calls over all lanes
        np.right_shift(pos, 3, out=idx)
        take_window(idx, out=idx)  # 32 bits starting at the byte holding bit `pos`
        np.bitwise_and(pos, 7, out=shift)
        np.left_shift(idx, shift, out=idx)
        np.right_shift(idx, drop, out=idx)  # the next max_len bits
        take_sym(idx, out=out[k])
        take_len(idx, out=step_len)
        np.add(pos, step_len, out=pos)
        if k + 1 == last_stop:
            last_end = int(pos[-1])
    ends = pos.astype(np.int64)
    ends[-1] = last_end
    _check_lane_ends(ends, starts, lane_bits)
    return lane_major(out)[:count]


def _check_lane_ends(ends: np.ndarray, starts: np.ndarray, lane_bits: np.ndarray) -> None:
    bad = np.flatnonzero(ends != starts + lane_bits)
    if bad.size:
        lane = int(bad[0])
        raise CodecError(
            f"corrupt Huffman data: lane {lane} decoded to bit {int(ends[lane])}, "
            f"its stored end is bit {int(starts[lane] + lane_bits[lane])}"
        )


def lane_major(out: np.ndarray) -> np.ndarray:
    """(steps, lanes) -> symbols in stream order.

    torch's tiled transpose is ~2x numpy's strided copy here, so it is used when the process already has
    torch loaded (a client); the PS never imports torch for it (that would cost it hundreds of MB of RSS).
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.from_numpy(out).T.contiguous().numpy().reshape(-1)
    return np.ascontiguousarray(out.T).reshape(-1)
