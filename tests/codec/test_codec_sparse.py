"""Sparse codec (issue 16): chunk-wise top-k, low-bit values, compact indices, against a plain-numpy reference
written here; the error-feedback recursion with decay; and every malformed frame the PS must refuse."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from geofed.codec import CodecError, ErrorFeedback, decoder_for, make_codec
from geofed.codec.header import StreamHeader, pack_frame, pack_header
from geofed.codec.sparse import SparseFrameError, policy_violation
from geofed.codec.sparse_params import SparseParams
from geofed.config import CodecConfig

from .conftest import heavy_tailed, roundtrip


def reference(x: np.ndarray, chunk: int, k: int, bits: int) -> np.ndarray:
    """What the receiver must end with, written from the definition, one chunk at a time: keep the k largest
    magnitudes, scale s = the largest of them, magnitude levels s·j/L for j = 1..L (L = 2^(bits-1)) rounded to
    the nearest (at least the first), sign kept."""
    out = np.zeros(x.size, dtype=np.float64)
    levels = 2 ** (bits - 1)
    for a in range(0, x.size, chunk):
        c = x[a : a + chunk].astype(np.float64)
        kk = min(k, c.size)
        keep = sorted(range(c.size), key=lambda i: -abs(c[i]))[:kk]
        s = max(abs(c[i]) for i in keep)
        for i in keep:
            j = min(max(round(abs(c[i]) / s * levels), 1), levels) if s > 0 else 1
            out[a + i] = np.sign(c[i]) * float(np.float32(s) * np.float32(j / levels))
    return out.astype(np.float32)


def codec(chunk=256, k=8, bits=2, index="rice"):
    return make_codec("sparse", sparse=SparseParams(chunk, k, bits, index))


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("index", ["rice", "fixed"])
def test_decoded_equals_reference_topk_and_quantisation(bits, index):
    x = heavy_tailed(3000, seed=bits)  # 11 full chunks of 256 and a short one of 184; frames of 1024
    out, header, payload = roundtrip(codec(bits=bits, index=index), x, frame_elems=1024)
    np.testing.assert_array_equal(out, reference(x, 256, 8, bits))
    assert np.count_nonzero(out) == 12 * 8


def test_residual_is_what_was_not_sent():
    x = heavy_tailed(5000, seed=3)
    res = np.empty_like(x)
    header, frames = codec().encode(x, frame_elems=2048, residual_out=res)
    dec = decoder_for(header, max_numel=x.size)
    sent = np.concatenate([v for f in frames for _, v in dec.feed(f)])
    np.testing.assert_array_equal(res, x - sent)


def test_bytes_per_value_far_below_fp32():
    x = heavy_tailed(1 << 18, seed=4)
    _, _, payload = roundtrip(codec(chunk=4096, k=41), x, frame_elems=1 << 16)  # 1 % density
    assert len(payload) * 100 < 4 * x.size  # more than 100x below fp32


def test_each_frame_decodes_alone_at_its_offset():
    x = heavy_tailed(4096, seed=5)
    c = codec()
    header, frames = c.encode(x, frame_elems=1024)
    frames = list(frames)
    ref = reference(x, 256, 8, 2)
    dec = c.frame_decoder(b"")
    for i, f in enumerate(frames):
        body_len, offset, count = struct.unpack_from("<4xIQI", f)
        pos, vals = dec.decode_sparse(offset, count, f[20:])
        assert offset == 1024 * i and pos.min() >= offset and pos.max() < offset + count
        np.testing.assert_array_equal(vals, ref[pos])
        assert np.count_nonzero(ref[offset : offset + count]) == pos.size


def test_error_feedback_recursion_with_decay_matches_reference():
    beta, n = np.float32(0.9), 2048
    c = codec()
    ef = ErrorFeedback(n, decay=0.9)
    e = np.zeros(n, dtype=np.float32)
    for r in range(6):
        delta = heavy_tailed(n, seed=10 + r)
        e = beta * e + delta  # e <- β·e + Δ
        sent_ref = reference(e, 256, 8, 2)  # send Q(topk(e))
        header, frames = ef.encode(c, delta, frame_elems=1024)
        dec = decoder_for(header, max_numel=n)
        sent = np.concatenate([v for f in frames for _, v in dec.feed(f)])
        np.testing.assert_array_equal(sent, sent_ref)
        ef.commit()
        e = e - sent_ref  # e <- e - Q(topk(e))
        np.testing.assert_array_equal(ef.residual, e)


def test_decay_must_be_in_range():
    with pytest.raises(CodecError, match="decay"):
        ErrorFeedback(10, decay=0.0)
    with pytest.raises(CodecError, match="decay"):
        ErrorFeedback(10, decay=1.5)


# ---- bad input: every frame the PS must refuse -------------------------------------------------------

def _bits(values, width) -> bytes:
    """LSB-first bit packing, written independently of the codec's kernels."""
    bits = [(v >> i) & 1 for v in values for i in range(width)]
    bits += [0] * (-len(bits) % 8)
    return bytes(sum(b << i for i, b in enumerate(bits[j : j + 8])) for j in range(0, len(bits), 8))


def _stream(params: SparseParams, count: int, scales, positions, codes, rice=0, index_bytes=None) -> tuple:
    """(header, frame) of one hand-built sparse frame of `count` elements."""
    idx = index_bytes if index_bytes is not None else _bits(positions, (params.chunk - 1).bit_length())
    body = (np.asarray(scales, "<f4").tobytes() + struct.pack("<BI", rice, len(idx)) + idx
            + _bits(codes, params.bits))
    header = pack_header(StreamHeader(params.name, count, count, b""))
    return header, pack_frame(0, count, body)


def _decode(header, frame):
    dec = decoder_for(header, max_numel=1 << 20)
    out = [v for _, v in dec.feed(frame)]
    dec.finish()
    return out


FIXED = SparseParams(16, 3, 2, "fixed")


def test_hand_built_frame_decodes():
    header, frame = _stream(FIXED, 16, [2.0], [1, 5, 9], [0b01, 0b11, 0b00])
    (vals,) = _decode(header, frame)
    expected = np.zeros(16, np.float32)
    expected[[1, 5, 9]] = [2.0, -2.0, 1.0]
    np.testing.assert_array_equal(vals, expected)


@pytest.mark.parametrize(("positions", "match"), [
    ([1, 5, 5], "repeated or out of order"),
    ([5, 1, 9], "repeated or out of order"),
])
def test_repeated_or_unordered_indices_are_refused(positions, match):
    header, frame = _stream(FIXED, 16, [1.0], positions, [0, 0, 0])
    with pytest.raises(SparseFrameError, match=match):
        _decode(header, frame)


def test_index_past_the_chunk_is_refused():
    p = SparseParams(16, 3, 2, "fixed")
    header, frame = _stream(p, 12, [1.0], [1, 5, 13], [0, 0, 0])  # a 12-element frame: 13 is outside
    with pytest.raises(SparseFrameError, match="out of range"):
        _decode(header, frame)


def test_rice_gap_past_the_chunk_is_refused():
    p = SparseParams(16, 2, 2, "rice")
    # Rice r = 2, LSB-first: gap 3 is "0" then 3's two low bits; gap 15 is "111" "0" then 15's low bits (3).
    # Positions 3, then 3 + 1 + 15 = 19: past the 16-element chunk.
    idx = _bits([0, 1, 1] + [1, 1, 1, 0, 1, 1], 1)
    header, frame = _stream(p, 16, [1.0], [], [0, 0], rice=2, index_bytes=idx)
    with pytest.raises(SparseFrameError, match="out of range"):
        _decode(header, frame)


@pytest.mark.parametrize("scale", [np.nan, np.inf, -np.inf, -1.0])
def test_non_finite_or_negative_scale_is_refused(scale):
    header, frame = _stream(FIXED, 16, [scale], [1, 5, 9], [0, 0, 0])
    with pytest.raises(SparseFrameError, match="chunk 0 has scale"):
        _decode(header, frame)


def test_truncated_and_padded_bodies_are_refused():
    header, frame = _stream(FIXED, 16, [1.0], [1, 5, 9], [0, 0, 0])
    body_len = struct.unpack_from("<I", frame, 4)[0]
    short = frame[:4] + struct.pack("<I", body_len - 1) + frame[8:-1]
    with pytest.raises(CodecError, match="truncated"):
        _decode(header, short)
    with pytest.raises(CodecError):  # an index stream longer than the positions need
        _decode(*_stream(FIXED, 16, [1.0], [1, 5, 9], [0, 0, 0], index_bytes=_bits([1, 5, 9], 4) + b"\0"))


@pytest.mark.parametrize("wire", ["sparse/c0016k3v2+rice", "sparse/c16k17v2+rice", "sparse/c16k3v3+rice",
                                  "sparse/c16k3v2+zip", "sparse/c8k3v2+rice"])
def test_bad_wire_names_are_refused(wire):
    header = pack_header(StreamHeader(wire, 16, 16, b""))
    with pytest.raises(CodecError):
        decoder_for(header, max_numel=16)


def test_federation_policy_density_bits_and_codec():
    cfg = CodecConfig(name="sparse", sparse_density=0.02, sparse_chunk=4096, sparse_value_bits=2)
    assert policy_violation("sparse/c4096k82v2+rice", cfg) is None
    assert policy_violation("sparse/c1024k20v2+fixed", cfg) is None  # 2 % at another chunk size
    assert "density" in policy_violation("sparse/c4096k83v2+rice", cfg)
    assert "4-bit" in policy_violation("sparse/c4096k82v4+rice", cfg)
    assert "density" in policy_violation("sparse/c16k1v2+rice", cfg)  # 1 of 16 is 6 %, not the rounded-up minimum
    assert "density" in policy_violation("sparse/c1024k21v2+rice", cfg)
    assert "not accepted" in policy_violation("int8+huffman", cfg)


# ---- the sparse model stream's transfer (geofed.codec.sparse_increments) --------------------------------

def test_increment_chain_applies_in_order_and_refuses_bad_transfers():
    from geofed.codec.sparse_increments import apply_chain, pack_chain, pack_increment

    held = heavy_tailed(1000, seed=8)
    incs = [pack_increment(*codec().encode(heavy_tailed(1000, seed=20 + i))) for i in range(3)]
    expected = held.copy()
    for i in range(3):
        expected += reference(heavy_tailed(1000, seed=20 + i), 256, 8, 2)  # one float32 add per version
    got = apply_chain(held, pack_chain(incs))
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(CodecError, match="bad magic"):
        apply_chain(held, b"XXXX" + pack_chain(incs)[4:])
    with pytest.raises(CodecError, match="0 increments"):
        apply_chain(held, pack_chain([]))
    with pytest.raises(CodecError, match="truncated"):
        apply_chain(held, pack_chain(incs)[:-3])
    with pytest.raises(CodecError, match="more than the allowed 999"):
        apply_chain(held[:999], pack_chain(incs))
    with pytest.raises(CodecError, match="for 1000 values, the model has 1001"):
        apply_chain(np.append(held, 0), pack_chain(incs))
    dense = pack_increment(*make_codec("fp32").encode(held))
    with pytest.raises(CodecError, match="not a sparse codec"):
        apply_chain(held, pack_chain([dense]))


def test_frames_cut_at_shard_bounds_decode_alone():
    x = heavy_tailed(3000, seed=9)
    c = codec()
    header, frames = c.encode(x, frame_elems=1024, cuts=(700, 2100))
    frames = list(frames)
    spans = [struct.unpack_from("<4xIQI", f)[1:] for f in frames]
    assert spans == [(0, 700), (700, 324), (1024, 1024), (2048, 52), (2100, 900)]
    ref = np.concatenate([reference(x[a : a + n], 256, 8, 2) for a, n in spans])  # chunks counted per frame
    dec = c.frame_decoder(b"")
    out = np.zeros_like(x)
    for f, (a, n) in zip(frames, spans, strict=True):
        pos, vals = dec.decode_sparse(a, n, f[20:])
        out[pos] = vals
    np.testing.assert_array_equal(out, ref)
