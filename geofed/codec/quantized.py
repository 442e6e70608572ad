"""The paper's codec (§III-B3): flattened delta -> min-max int8/int16 -> entropy stage, in frames.

Passes over the input, each holding at most one frame of temporaries:
  1. ranges: one global (min, max), or one per block of `block` elements (reductions, no copy);
  2. histogram of the quantised symbols (for Huffman/ANS tables) and the residual for error feedback;
  3. lazily, per frame: quantise again and entropy-code.
Re-quantising in pass 3 costs a few numpy ops per element but keeps memory at O(frame) instead of a
full symbol copy; encoder and decoder use identical float32 arithmetic, so both passes agree exactly.
Per-block ranges travel inside the frames that use them, so every frame decodes on its own.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Sequence

import numpy as np

from geofed.codec import quantize as qz
from geofed.codec.base import DEFAULT_FRAME_ELEMS, Codec, FrameDecoder, check_encode_args, frame_ranges
from geofed.codec.entropy import ENTROPY_KINDS, NEEDS_HISTOGRAM, EntropyStage, build_stage, read_stage
from geofed.codec.errors import CodecError
from geofed.codec.header import Reader, StreamHeader, pack_frame, pack_header
from geofed.codec_specs import INT8, INT16


class _Ranges:
    """Quantisation ranges for the whole vector (encoder) or one frame (decoder), expanded per frame."""

    def __init__(self, bits: int, block: int, lo: np.ndarray, hi: np.ndarray, first_block: int = 0) -> None:
        self.bits, self.block, self.lo, self.hi, self.first = bits, block, lo, hi, first_block
        self.mid, self.step, self.inv = qz.steps(lo, hi, bits)

    def for_frame(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mid, step, 1/step) for elements [a, b): scalars when global, per-element arrays per block."""
        if not self.block:
            return self.mid[0], self.step[0], self.inv[0]
        f, s = qz.block_span(a, b, self.block)
        sl = slice(f - self.first, s - self.first)
        return tuple(qz.per_element(v[sl], a, b, self.block) for v in (self.mid, self.step, self.inv))

    def frame_bytes(self, a: int, b: int) -> bytes:
        """The (lo, hi) pairs of the blocks frame [a, b) touches; empty for a global range."""
        if not self.block:
            return b""
        f, s = qz.block_span(a, b, self.block)
        return self.lo[f:s].astype("<f4").tobytes() + self.hi[f:s].astype("<f4").tobytes()


MAX_BLOCK = 1 << 26


class QuantizedCodec(Codec):
    """Min-max quantisation to `bits` (8 or 16) with an entropy stage; `block` = 0 means one global range."""

    def __init__(self, entropy: str, block: int) -> None:
        self.entropy, self.block = entropy, block

    @classmethod
    def build(cls, entropy: str, block_scales: int, sparse: object = None) -> QuantizedCodec:
        if entropy not in ENTROPY_KINDS:
            raise CodecError(f"unknown entropy stage {entropy!r}; known: {', '.join(ENTROPY_KINDS)}")
        if (
            isinstance(block_scales, bool)
            or not isinstance(block_scales, int)
            or (block_scales and not qz.MIN_BLOCK <= block_scales <= MAX_BLOCK)
        ):
            raise CodecError(
                f"block_scales must be 0 (global) or an int in [{qz.MIN_BLOCK}, {MAX_BLOCK}], got {block_scales!r}"
            )
        return cls(entropy, block_scales)

    @classmethod
    def from_wire(cls, wire: str) -> QuantizedCodec | None:
        m = re.fullmatch(rf"int{cls.spec.value_bits}\+([a-z]+)(?:/b([0-9]{{1,9}}))?", wire)
        return cls.build(m.group(1), int(m.group(2) or 0)) if m else None

    @property
    def bits(self) -> int:
        return self.spec.value_bits

    @property
    def name(self) -> str:
        return f"int{self.bits}+{self.entropy}" + (f"/b{self.block}" if self.block else "")

    def encode(
        self,
        flat: np.ndarray,
        *,
        frame_elems: int = DEFAULT_FRAME_ELEMS,
        residual_out: np.ndarray | None = None,
        cuts: Sequence[int] = (),
    ) -> tuple[bytes, Iterator[bytes]]:
        check_encode_args(flat, frame_elems, residual_out)
        frame_elems = int(frame_elems)
        if self.block:
            ranges = _Ranges(self.bits, self.block, *qz.block_ranges(flat, self.block))
        else:
            lo, hi = qz.global_range(flat)
            ranges = _Ranges(self.bits, 0, np.array([lo], np.float32), np.array([hi], np.float32))
        counts = self._histogram_pass(flat, ranges, frame_elems, residual_out, cuts)
        stage = build_stage(self.entropy, self.bits, counts, frame_elems)
        glob = struct.pack("<ff", ranges.lo[0], ranges.hi[0]) if not self.block else b""
        header = pack_header(StreamHeader(self.name, flat.size, frame_elems, glob + stage.params()))
        return header, self._frames(flat, ranges, stage, frame_elems, cuts)

    def _histogram_pass(
        self, flat: np.ndarray, ranges: _Ranges, frame_elems: int, residual_out: np.ndarray | None,
        cuts: Sequence[int] = (),
    ) -> np.ndarray | None:
        need_hist = NEEDS_HISTOGRAM[self.entropy]
        if not need_hist and residual_out is None:
            return None
        counts = np.zeros(1 << self.bits, dtype=np.int64)
        n = min(frame_elems, flat.size)
        scratch, syms = np.empty(n, np.float32), np.empty(n, qz.symbol_dtype(self.bits))
        for a, b in frame_ranges(flat.size, frame_elems, cuts):
            mid, step, inv = ranges.for_frame(a, b)
            q = qz.quantize_into(flat[a:b], mid, inv, self.bits, scratch[: b - a], syms[: b - a])
            if need_hist:
                qz.add_histogram(counts, q)
            if residual_out is not None:
                deq = qz.dequantize_into(q, mid, step, self.bits, scratch[: b - a])
                np.subtract(flat[a:b], deq, out=residual_out[a:b])
        return counts

    def _frames(self, flat: np.ndarray, ranges: _Ranges, stage: EntropyStage, frame_elems: int,
                cuts: Sequence[int] = ()) -> Iterator[bytes]:
        n = min(frame_elems, flat.size)
        if n == 0:
            return
        scratch, syms = np.empty(n, np.float32), np.empty(n, qz.symbol_dtype(self.bits))
        encode = stage.encoder(n)
        for a, b in frame_ranges(flat.size, frame_elems, cuts):
            mid, _, inv = ranges.for_frame(a, b)
            q = qz.quantize_into(flat[a:b], mid, inv, self.bits, scratch[: b - a], syms[: b - a])
            yield pack_frame(a, b - a, ranges.frame_bytes(a, b) + encode(q))

    def frame_decoder(self, params: bytes) -> FrameDecoder:
        r = Reader(params, "codec parameters")
        ranges = None
        if not self.block:
            lo, hi = (np.array([v], np.float32) for v in r.unpack("<ff", "global min/max"))
            qz.check_ranges(lo, hi, "header")
            ranges = _Ranges(self.bits, 0, lo, hi)
        stage = read_stage(self.entropy, self.bits, r)
        r.expect_end()
        return _QuantizedFrameDecoder(self, stage, ranges)


class _QuantizedFrameDecoder(FrameDecoder):
    def __init__(self, codec: QuantizedCodec, stage: EntropyStage, ranges: _Ranges | None) -> None:
        self.codec, self.stage, self.ranges = codec, stage, ranges

    def _n_blocks(self, offset: int, count: int) -> int:
        if not self.codec.block:
            return 0
        f, s = qz.block_span(offset, offset + count, self.codec.block)
        return s - f

    def max_body_bytes(self, offset: int, count: int) -> int:
        return 8 * self._n_blocks(offset, count) + self.stage.max_bytes(count)

    def decode(self, offset: int, count: int, body: bytes | memoryview) -> np.ndarray:
        r = Reader(body, f"frame at element {offset}")
        ranges = self.ranges
        if ranges is None:
            nb = self._n_blocks(offset, count)
            lo, hi = r.array("<f4", nb, "block minima"), r.array("<f4", nb, "block maxima")
            qz.check_ranges(lo, hi, f"frame at element {offset}")
            ranges = _Ranges(self.codec.bits, self.codec.block, lo, hi, offset // self.codec.block)
        syms = self.stage.decode(r, count)
        mid, step, _ = ranges.for_frame(offset, offset + count)
        return qz.dequantize_into(syms, mid, step, self.codec.bits, np.empty(count, np.float32))


class Int8Codec(QuantizedCodec):
    """256 levels: the default codec, a quarter of fp32's bytes before the entropy stage."""

    spec = INT8


class Int16Codec(QuantizedCodec):
    """65536 levels: 256x finer steps than int8, for links that carry them within the sync budget."""

    spec = INT16
