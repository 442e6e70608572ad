"""Framing and streaming: any chunking decodes the same, frames are self-contained, memory stays O(frame)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geofed.codec import decoder_for, make_codec
from geofed.codec.header import FRAME_PREFIX, parse_frame_prefix, parse_header
from geofed.codec.registry import codec_from_wire_name

from .conftest import heavy_tailed, roundtrip

SPECS = [("fp32",), ("bf16",), ("int8", "huffman"), ("int8", "ans"), ("int16", "huffman"), ("int8", "none", 64)]
X = heavy_tailed(5_003, seed=5)


def split(payload: bytes, cuts: list[int]) -> list[bytes]:
    edges = sorted({0, len(payload), *(c % (len(payload) + 1) for c in cuts)})
    return [payload[a:b] for a, b in zip(edges, edges[1:], strict=False)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "-".join(map(str, s)))
@settings(max_examples=15, deadline=None)
@given(cuts=st.lists(st.integers(0, 1 << 30), max_size=30))
def test_random_pieces_decode_like_whole_frames(spec: tuple, cuts: list[int]) -> None:
    codec = make_codec(*spec)
    whole, _, payload = roundtrip(codec, X, frame_elems=700)
    pieces, _, _ = roundtrip(codec, X, frame_elems=700, pieces=split(payload, cuts))
    assert np.array_equal(whole.view(np.uint32), pieces.view(np.uint32))


def test_byte_at_a_time_feeding_works() -> None:
    codec = make_codec("int8", "huffman", 128)
    x = X[:1000]
    whole, _, payload = roundtrip(codec, x, frame_elems=300)
    single, _, _ = roundtrip(codec, x, frame_elems=300, pieces=[payload[i : i + 1] for i in range(len(payload))])
    assert np.array_equal(whole, single)


def test_values_arrive_as_soon_as_a_frame_completes() -> None:
    header, frames = make_codec("int16", "ans").encode(X, frame_elems=2000)
    frames = list(frames)
    dec = decoder_for(header, max_numel=X.size)
    assert list(dec.feed(frames[0][:-1])) == []
    got = list(dec.feed(frames[0][-1:] + frames[1]))
    assert [(off, v.size) for off, v in got] == [(0, 2000), (2000, 2000)]
    assert dec.decoded == 4000


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "-".join(map(str, s)))
def test_each_frame_decodes_on_its_own(spec: tuple) -> None:
    """Frames carry all they need beyond the header: decode the last one first."""
    codec = make_codec(*spec)
    header, frames = codec.encode(X, frame_elems=1000)
    frames = list(frames)
    h = parse_header(header)
    decoder = codec_from_wire_name(h.name).frame_decoder(h.params)
    whole, _, _ = roundtrip(codec, X, frame_elems=1000)
    for frame in reversed(frames):
        body_len, offset, count = parse_frame_prefix(frame[: FRAME_PREFIX.size])
        assert len(frame) == FRAME_PREFIX.size + body_len
        values = decoder.decode(offset, count, frame[FRAME_PREFIX.size :])
        assert np.array_equal(values, whole[offset : offset + count])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "-".join(map(str, s)))
def test_empty_input_round_trips(spec: tuple) -> None:
    out, header, payload = roundtrip(make_codec(*spec), np.zeros(0, np.float32))
    assert out.size == 0 and payload == b""
    assert decoder_for(header, max_numel=0).numel == 0


def test_header_names_the_codec() -> None:
    for spec, name in [
        (("int8",), "int8+huffman"),
        (("int16", "ans"), "int16+ans"),
        (("int8", "huffman", 65536), "int8+huffman/b65536"),
        (("bf16",), "bf16"),
    ]:
        codec = make_codec(*spec)
        header, _ = codec.encode(X)
        dec = decoder_for(header, max_numel=X.size)
        assert codec.name == dec.codec_name == name
        assert dec.numel == X.size


def test_frames_are_lazy() -> None:
    """Nothing is entropy-coded until the iterator is pulled."""
    header, frames = make_codec("int8").encode(X, frame_elems=1000)
    first = next(frames)
    assert parse_frame_prefix(first[: FRAME_PREFIX.size])[1:] == (0, 1000)


@pytest.mark.parametrize("spec", [("int8", "huffman"), ("int16", "ans"), ("int8", "huffman", 4096), ("bf16",)])
def test_encoder_memory_is_bounded_by_frames_not_input(spec: tuple) -> None:
    """A 16 MB input encoded in 256 KB frames never holds a second full-size copy."""
    x = heavy_tailed(4_000_000, seed=11)
    codec = make_codec(*spec)
    tracemalloc.start()
    try:
        header, frames = codec.encode(x, frame_elems=1 << 16)
        total = sum(len(f) for f in frames)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total > 0
    assert peak < 0.25 * x.nbytes, f"peak {peak / 1e6:.1f} MB for a {x.nbytes / 1e6:.0f} MB input"
