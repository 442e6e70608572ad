"""Encode one rank's slice of a flat vector as its part of the stream a single encoder would write.

A site with several ranks encodes its delta slice-wise: rank r holds elements [start, stop)
of the flattened vector, frame-aligned. Frames already carry their flat offsets (`header.py`), so the
ranks' frames sent in rank order are one valid stream for the whole-vector `StreamDecoder`. What a frame alone
cannot carry is the header's global part: int8/int16 with one global range puts (min, max) of the
whole vector in the header (paper §III-B3), and Huffman/ANS put a table built from the whole vector's
symbol histogram there. The ranks agree on both before encoding, through the `Agreement` they are
given (the client all-reduces min, max and the histogram: 2 floats and 2^bits counts per rank), so
the header is the same on every rank and the frames are byte for byte those of the one-rank encoding.
Per-block ranges travel inside the frames; a slice aligned to whole blocks needs no agreement for them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from geofed.codec import quantize as qz
from geofed.codec.base import DEFAULT_FRAME_ELEMS, Codec, check_encode_args
from geofed.codec.entropy import NEEDS_HISTOGRAM, build_stage
from geofed.codec.errors import CodecError
from geofed.codec.floats import _FloatCodec
from geofed.codec.header import FRAME_PREFIX, StreamHeader, pack_header

# The quantised codec's own passes are reused (one code path, one byte format); they are private to
# `quantized.py` because nothing else needed them until a slice had to be encoded.
from geofed.codec.quantized import QuantizedCodec, _Ranges


class Agreement(Protocol):
    """Element-wise reductions of a small array across all ranks (every rank calls each, in the same order)."""

    def max(self, values: np.ndarray) -> np.ndarray: ...

    def sum(self, values: np.ndarray) -> np.ndarray: ...


class SliceCodec(Codec):
    """`codec` restricted to elements [start, start + len(flat)) of a `numel`-element vector.

    `encode` returns the whole stream's header (identical on every rank) and this slice's frames with
    their global offsets; `residual_out` is this slice's error-feedback residual. Use it where a
    `Codec` is expected (e.g. `ErrorFeedback.encode`), one per rank, all ranks encoding together.
    """

    def __init__(self, codec: Codec, start: int, numel: int, agree: Agreement) -> None:
        if not isinstance(codec, (QuantizedCodec, _FloatCodec)):
            raise CodecError(f"codec {codec.name!r} has no slice-wise encoder (known: fp32, bf16, int8, int16)")
        self.codec, self.start, self.numel, self.agree = codec, start, numel, agree

    @property
    def name(self) -> str:
        return self.codec.name

    def _slice_problem(self, size: int, frame_elems: int) -> str | None:
        """Why this slice cannot be encoded on its own, or None. An empty slice at the end is fine (a rank
        with nothing to send still takes part in the agreement)."""
        stop = self.start + size
        block = getattr(self.codec, "block", 0)
        if not 0 <= self.start <= stop <= self.numel:
            return f"slice [{self.start}, {stop}) is outside the {self.numel}-element vector"
        for unit, what in ((frame_elems, "frame"), (block, "block")):
            if unit and ((self.start % unit and self.start != self.numel) or (stop != self.numel and stop % unit)):
                return (f"slice [{self.start}, {stop}) does not start and end on {what} boundaries "
                        f"({what} = {unit} elements); frames would straddle two ranks")
        return None

    def encode(self, flat: np.ndarray, *, frame_elems: int = DEFAULT_FRAME_ELEMS,
               residual_out: np.ndarray | None = None, cuts: Sequence[int] = ()) -> tuple[bytes, Iterator[bytes]]:
        """`cuts`: global offsets where a frame must also end (a sharded PS's shard bounds, as for the whole
        vector); a slice starts on the frame grid, so its own grid and the cuts inside it give the frames the
        one-rank stream has there."""
        check_encode_args(flat, frame_elems, residual_out)
        frame_elems = int(frame_elems)
        problem = self._slice_problem(flat.size, frame_elems)
        local = tuple(c - self.start for c in cuts if self.start < c < self.start + flat.size)
        if isinstance(self.codec, QuantizedCodec):
            params, frames = self._quantized(flat, frame_elems, residual_out, problem, local)
        elif problem:
            raise CodecError(problem)
        else:
            _, frames = self.codec.encode(flat, frame_elems=frame_elems, residual_out=residual_out,
                                          **({"cuts": local} if local else {}))
            params = b""
        header = pack_header(StreamHeader(self.codec.name, self.numel, frame_elems, params))
        return header, _shifted(frames, self.start)

    def _ranges(self, flat: np.ndarray, problem: str | None) -> _Ranges:
        """The global range (max of -min and of max over ranks), or this slice's own per-block ranges.

        A misaligned slice or a non-finite value on any rank fails every rank (its flag rides on the first
        reduction), so no rank is left waiting in a later one."""
        c = self.codec
        bad, lo, hi = 0.0, np.float32(np.inf), np.float32(-np.inf)
        blocks = None
        try:
            if problem:
                bad = 2.0
            elif c.block:
                blocks = qz.block_ranges(flat, c.block)
            elif flat.size:
                lo, hi = qz.global_range(flat)
        except CodecError:
            bad = 1.0
        got = self.agree.max(np.array([bad, -lo, hi], dtype=np.float64))
        if problem:
            raise CodecError(problem)
        if got[0] == 2.0:
            raise CodecError("another rank's slice is not frame-aligned; nothing was encoded")
        if got[0]:
            raise CodecError("input contains non-finite values (NaN/Inf) on some rank; "
                             "min-max quantisation needs finite data")
        if blocks is not None:
            return _Ranges(c.bits, c.block, *blocks)
        lo_g, hi_g = (np.float32(0), np.float32(0)) if got[2] < -got[1] else (np.float32(-got[1]), np.float32(got[2]))
        return _Ranges(c.bits, 0, np.array([lo_g], np.float32), np.array([hi_g], np.float32))

    def _quantized(self, flat: np.ndarray, frame_elems: int, residual_out: np.ndarray | None,
                   problem: str | None, cuts: Sequence[int] = ()) -> tuple[bytes, Iterator[bytes]]:
        c = self.codec
        ranges = self._ranges(flat, problem)
        counts = c._histogram_pass(flat, ranges, frame_elems, residual_out, cuts)
        if NEEDS_HISTOGRAM[c.entropy]:
            counts = self.agree.sum(counts.astype(np.int64)).astype(np.int64)
        stage = build_stage(c.entropy, c.bits, counts, frame_elems)
        glob = struct.pack("<ff", ranges.lo[0], ranges.hi[0]) if not c.block else b""
        return glob + stage.params(), c._frames(flat, ranges, stage, frame_elems, cuts)


def _shifted(frames: Iterator[bytes], start: int) -> Iterator[bytes]:
    """Frames whose offsets count from the slice's start, re-prefixed with their global offsets."""
    for frame in frames:
        magic, body_len, offset, count = FRAME_PREFIX.unpack_from(frame)
        yield FRAME_PREFIX.pack(magic, body_len, offset + start, count) + frame[FRAME_PREFIX.size :]

