"""Sparse codec (SparseLoCo, Sarfi et al. 2025): chunk-wise top-k, low-bit values, compact indices.

Each frame is cut into chunks of `chunk` elements (frames hold whole chunks, so every frame decodes on
its own at its flat offset, like the dense codecs' frames; a rank-local slice encodes on its own too).
In every chunk the `k` largest magnitudes are kept (a short last chunk keeps min(k, its length)); the
rest is dropped, for the caller's error feedback to carry (`residual_out`, see `error_feedback`).

Values: sign plus a (bits − 1)-bit magnitude level on a per-chunk scale s (the chunk's largest kept
magnitude, float32): magnitude = s · (level + 1) / 2^(bits−1), so 2 bits send ±s/2 or ±s. Levels never
encode zero: a dropped value costs nothing, a kept one is never wasted.

Indices: chunk-relative, sorted; "rice" codes the gaps between them (Golomb-Rice, the parameter chosen
per frame for the fewest bits: ~log2(chunk/k) + 1.5 bits an entry), "fixed" writes ceil(log2 chunk) bits.

Frame body: f32 scale per chunk | u8 Rice parameter (0 for fixed) | u32 index bytes | index stream |
value codes (bits each, LSB-first). The wire name carries every parameter, e.g.
"sparse/c4096k64v2+rice", so the PS can check density and bit width against the federation's settings.

Decoding validates everything (sizes, positions in range and strictly increasing, finite non-negative
scales) and can yield (positions, values) instead of a dense frame, so the PS sums with work O(nonzeros).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Sequence

import numpy as np

from geofed.codec.base import DEFAULT_FRAME_ELEMS, Codec, FrameDecoder, check_encode_args, frame_ranges
from geofed.codec.errors import CodecError
from geofed.codec.header import MAX_FRAME_ELEMS, Reader, StreamHeader, pack_frame, pack_header
from geofed.codec.sparse_params import SparseParams, parse_sparse_name
from geofed.codec_specs import SPARSE

MAX_RICE = 24


class SparseFrameError(CodecError):
    """A sparse frame whose indices, scales or sizes are invalid (out of range, repeated, non-finite)."""


def k_for(density: float, chunk: int) -> int:
    """Entries kept per chunk of `chunk` elements at `density` (at least one)."""
    return max(1, min(chunk, round(density * chunk)))


def _chunk_layout(count: int, chunk: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(length, kept entries) of each chunk of a `count`-element frame."""
    n = -(-count // chunk)
    lens = np.full(n, chunk, dtype=np.int64)
    if count % chunk:
        lens[-1] = count % chunk
    return lens, np.minimum(lens, k)


def dequantize(scales: np.ndarray, codes: np.ndarray, bits: int) -> np.ndarray:
    """float32 values of value `codes` on their chunk `scales` (one per entry); encoder and decoder share it."""
    levels = 1 << (bits - 1)
    frac = ((codes & (levels - 1)).astype(np.float32) + np.float32(1)) * np.float32(1.0 / levels)  # exact, <= 1
    mag = scales * frac
    return np.where(codes >> (bits - 1) != 0, -mag, mag).astype(np.float32)


def _pack_codes(codes: np.ndarray, bits: int) -> bytes:
    per = 8 // bits
    padded = np.zeros(-(-codes.size // per) * per, dtype=np.uint8)
    padded[: codes.size] = codes
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    return np.bitwise_or.reduce(padded.reshape(-1, per) << shifts, axis=1).astype(np.uint8).tobytes()


def _unpack_codes(data: memoryview, n: int, bits: int) -> np.ndarray:
    per = 8 // bits
    raw = np.frombuffer(data, dtype=np.uint8)
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    return ((raw[:, None] >> shifts) & np.uint8((1 << bits) - 1)).reshape(-1)[:n]


def _code_bytes(n: int, bits: int) -> int:
    return -(-n * bits // 8)


class SparseCodec(Codec):
    """Chunk-wise top-k with low-bit values and compact indices (see the module docstring)."""

    spec = SPARSE

    def __init__(self, params: SparseParams) -> None:
        self.params = params

    @classmethod
    def build(cls, entropy: str, block_scales: int, sparse: SparseParams | None) -> SparseCodec:
        if sparse is None:
            raise CodecError("the sparse codec needs its parameters (chunk, k, value bits, index coding)")
        return cls(sparse)

    @classmethod
    def from_wire(cls, wire: str) -> SparseCodec | None:
        params = parse_sparse_name(wire)
        return None if params is None else cls(params)

    @property
    def name(self) -> str:
        return self.params.name

    def frame_size(self, frame_elems: int) -> int:
        """Frames hold whole chunks: `frame_elems` rounded down to a multiple of the chunk (at least one)."""
        chunk = self.params.chunk
        return max(chunk, min(frame_elems, MAX_FRAME_ELEMS) // chunk * chunk)

    def encode(
        self,
        flat: np.ndarray,
        *,
        frame_elems: int = DEFAULT_FRAME_ELEMS,
        residual_out: np.ndarray | None = None,
        cuts: Sequence[int] = (),
    ) -> tuple[bytes, Iterator[bytes]]:
        """Frames are built at once (they are O(nonzeros) bytes) so the residual is complete on return.

        A frame ended early by a cut (a sharded PS's shard bound) ends with a short chunk; chunks are counted
        from each frame's start, so every frame still decodes on its own."""
        check_encode_args(flat, frame_elems, residual_out)
        fe = self.frame_size(int(frame_elems))
        frames = []
        for a, b in frame_ranges(flat.size, fe, cuts):
            body, pos, values = self._encode_frame(flat[a:b])
            if residual_out is not None:
                residual_out[a:b] = flat[a:b]
                residual_out[a + pos] -= values
            frames.append(pack_frame(a, b - a, body))
        header = pack_header(StreamHeader(self.name, flat.size, fe, b""))
        return header, iter(frames)

    def select(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(frame-relative sorted positions, their chunk index, per-chunk scale) of one frame's top-k."""
        p = self.params
        lens, ks = _chunk_layout(x.size, p.chunk, p.k)
        full = x.size // p.chunk
        parts = []
        if full:
            mags = np.abs(x[: full * p.chunk].reshape(full, p.chunk))
            k = min(p.k, p.chunk)
            top = np.argpartition(mags, p.chunk - k, axis=1)[:, p.chunk - k :] if k < p.chunk else \
                np.broadcast_to(np.arange(p.chunk), (full, p.chunk))
            top = np.sort(top, axis=1) + (np.arange(full, dtype=np.int64) * p.chunk)[:, None]
            parts.append(top.reshape(-1))
        if lens.size > full:  # the short last chunk keeps min(k, its length)
            tail = np.abs(x[full * p.chunk :])
            kk = int(ks[-1])
            top = np.argpartition(tail, tail.size - kk)[tail.size - kk :] if kk < tail.size else np.arange(tail.size)
            parts.append(np.sort(top) + full * p.chunk)
        pos = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
        chunk_of = np.repeat(np.arange(lens.size), ks)
        mags = np.abs(x[pos])
        scales = np.zeros(lens.size, dtype=np.float32)
        np.maximum.at(scales, chunk_of, mags)
        return pos, chunk_of, scales

    def _encode_frame(self, x: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
        """(body, frame-relative positions, decoded values) of one frame."""
        from geofed.codec import _sparse_kernels as kern

        p = self.params
        if not np.isfinite(x).all():
            raise CodecError("the sparse codec encodes finite values only (the PS refuses NaN/Inf anyway)")
        pos, chunk_of, scales = self.select(x)
        vals = x[pos]
        levels = 1 << (p.bits - 1)
        s = scales[chunk_of]
        safe = np.where(s > 0, s, np.float32(1))
        lvl = np.clip(np.rint(np.abs(vals) / safe * levels), 1, levels).astype(np.uint8) - np.uint8(1)
        codes = lvl | (np.signbit(vals).astype(np.uint8) << np.uint8(p.bits - 1))
        decoded = dequantize(s, codes, p.bits)
        rel = pos - chunk_of.astype(np.int64) * p.chunk
        buf = np.empty(8 + _max_index_bytes(pos.size, x.size, p), dtype=np.uint8)
        if p.index == "rice":
            gaps = rel.copy()
            gaps[1:] -= rel[:-1] + 1
            starts = np.flatnonzero(np.diff(chunk_of, prepend=-1))  # first entry of each chunk: gap from -1
            gaps[starts] = rel[starts]
            r = min(range(MAX_RICE + 1), key=lambda t: kern.rice_bits(gaps, t))
            used = kern.encode(gaps, r, 0, buf)
        else:
            r = 0
            used = kern.encode(rel, 0, _width(p.chunk), buf)
        body = (scales.astype("<f4").tobytes() + struct.pack("<BI", r, used) + buf[:used].tobytes()
                + _pack_codes(codes, p.bits))
        return body, pos, decoded

    def frame_decoder(self, params: bytes) -> FrameDecoder:
        if params:
            raise CodecError(f"{self.name} header carries {len(params)} unexpected parameter bytes")
        return SparseFrameDecoder(self.params)


def _width(chunk: int) -> int:
    return max(1, math.ceil(math.log2(chunk)))


def _max_index_bytes(entries: int, count: int, p: SparseParams) -> int:
    if p.index == "fixed":
        return -(-entries * _width(p.chunk) // 8)
    return -(-(count + entries * (1 + MAX_RICE)) // 8)  # Σ gaps >> r ≤ count: unary bits bounded by the frame


class SparseFrameDecoder(FrameDecoder):
    """Validating decoder of one sparse frame, dense (`decode`) or as (positions, values) (`decode_sparse`)."""

    def __init__(self, params: SparseParams) -> None:
        self.params = params

    def max_body_bytes(self, offset: int, count: int) -> int:
        p = self.params
        _, ks = _chunk_layout(count, p.chunk, p.k)
        n = int(ks.sum())
        return 4 * ks.size + 5 + _max_index_bytes(n, count, p) + _code_bytes(n, p.bits)

    def decode_sparse(self, offset: int, count: int, body: bytes | memoryview) -> tuple[np.ndarray, np.ndarray]:
        """(absolute positions, float32 values) of one frame; SparseFrameError naming what is wrong."""
        from geofed.codec import _sparse_kernels as kern

        p = self.params
        where = f"sparse frame at element {offset}"
        lens, ks = _chunk_layout(count, p.chunk, p.k)
        r = Reader(body, where)
        scales = r.array("<f4", lens.size, "chunk scales")
        bad = ~np.isfinite(scales) | (scales < 0)
        if bad.any():
            c = int(np.flatnonzero(bad)[0])
            raise SparseFrameError(f"{where}: chunk {c} has scale {float(scales[c])}; scales must be finite and >= 0")
        rice, nidx = r.unpack("<BI", "index stream size")
        n = int(ks.sum())
        if p.index == "fixed" and rice:
            raise SparseFrameError(f"{where}: fixed-width indices with a Rice parameter {rice}")
        if rice > MAX_RICE:
            raise SparseFrameError(f"{where}: Rice parameter {rice} above {MAX_RICE}")
        idx_buf = np.frombuffer(r.take(nidx, "index stream"), dtype=np.uint8)
        codes = _unpack_codes(r.take(_code_bytes(n, p.bits), "value codes"), n, p.bits)
        r.expect_end()
        pos = np.empty(n, dtype=np.int64)
        width = _width(p.chunk) if p.index == "fixed" else 0
        err, chunk, used = kern.decode(idx_buf, rice, width, lens, ks, pos)
        if err:
            raise SparseFrameError(f"{where}, chunk {chunk}: {_INDEX_ERRORS[err]}")
        if used != nidx:
            raise SparseFrameError(f"{where}: index stream has {nidx - used} unused trailing bytes")
        chunk_of = np.repeat(np.arange(lens.size), ks)
        return pos + offset, dequantize(scales[chunk_of], codes, p.bits)

    def decode(self, offset: int, count: int, body: bytes | memoryview) -> np.ndarray:
        pos, vals = self.decode_sparse(offset, count, body)
        out = np.zeros(count, dtype=np.float32)
        out[pos - offset] = vals
        return out


_INDEX_ERRORS = {
    1: "index stream truncated",
    2: "index out of range (past the chunk's end)",
    3: "indices repeated or out of order (each chunk's indices must be strictly increasing)",
    4: "index gap longer than its chunk (corrupt Rice code)",
}


def sparse_params(cfg) -> SparseParams:
    """The federation's sparse parameters from a `geofed.config.CodecConfig`."""
    return SparseParams(cfg.sparse_chunk, k_for(cfg.sparse_density, cfg.sparse_chunk), cfg.sparse_value_bits,
                        cfg.sparse_index)


def policy_violation(wire: str, cfg) -> str | None:
    """Why a push coded as `wire` is outside what the federation's `CodecConfig` allows; None if it is not.

    A sparse federation takes sparse payloads no denser than its density (at the push's own chunk size)
    and with no more value bits than its setting: a client cannot buy bandwidth or influence by sending more.
    """
    p = parse_sparse_name(wire)
    if p is None:
        return f"this federation runs the sparse codec; a {wire!r} payload is not accepted"
    # At the federation's own chunk size its rounded k is allowed; at another one the density itself is the
    # bound (rounding up there would let tiny chunks, e.g. 1 of every 16 values, buy a higher density).
    allowed_k = (k_for(cfg.sparse_density, p.chunk) if p.chunk == cfg.sparse_chunk
                 else math.floor(cfg.sparse_density * p.chunk + 1e-9))
    if p.k > allowed_k:
        return (f"density {p.k}/{p.chunk} = {p.density:.4g} is above the federation's {cfg.sparse_density:g} "
                f"(at most {allowed_k} of every {p.chunk} values)")
    if p.bits > cfg.sparse_value_bits:
        return f"{p.bits}-bit values are above the federation's {cfg.sparse_value_bits} bits"
    return None
