"""rANS stage: lossless on any histogram, the header model rebuilds exactly, bad frames are caught."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geofed.codec.ans import AnsModel
from geofed.codec.errors import CodecError
from geofed.codec.header import Reader


def through_header(model: AnsModel) -> AnsModel:
    r = Reader(model.to_bytes(), "params")
    out = AnsModel.read(r, model.alphabet)
    r.expect_end()
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 255), min_size=1, max_size=2000))
def test_int8_symbols_round_trip_exactly(data: list[int]) -> None:
    syms = np.array(data, dtype=np.uint8)
    enc = AnsModel.from_counts(np.bincount(syms, minlength=256))
    body = enc.encode(syms)
    out = through_header(enc).decode(Reader(body, "frame"), syms.size, np.dtype(np.uint8))
    assert out.dtype == np.uint8 and np.array_equal(out, syms)


@pytest.mark.parametrize("kind", ["skewed", "single", "wide"])
def test_int16_symbols_round_trip_exactly(kind: str, rng: np.random.Generator) -> None:
    if kind == "skewed":
        syms = np.clip(np.rint(rng.standard_t(2.0, 50_000) * 3 + 30000), 0, 65535).astype(np.uint16)
    elif kind == "single":
        syms = np.full(1000, 65535, dtype=np.uint16)
    else:
        syms = rng.integers(0, 65536, 50_000).astype(np.uint16)
    enc = AnsModel.from_counts(np.bincount(syms, minlength=65536))
    out = through_header(enc).decode(Reader(enc.encode(syms), "frame"), syms.size, np.dtype(np.uint16))
    assert np.array_equal(out, syms)


def test_rate_is_close_to_entropy_below_one_bit(rng: np.random.Generator) -> None:
    """Where Huffman cannot go below 1 bit/symbol, ANS tracks the entropy."""
    syms = (rng.random(200_000) < 0.03).astype(np.uint8)
    counts = np.bincount(syms, minlength=256)
    p = counts[counts > 0] / counts.sum()
    entropy = float(-(p * np.log2(p)).sum())
    bits = 8 * len(AnsModel.from_counts(counts).encode(syms)) / syms.size
    assert entropy < bits < entropy * 1.01 + 0.001


def test_huge_counts_are_scaled_without_dropping_symbols() -> None:
    counts = np.zeros(256, np.int64)
    counts[[0, 5, 9]] = [3 << 40, 1, 7 << 33]
    model = AnsModel.from_counts(counts)
    assert model.weights.dtype == np.uint32 and (model.weights[[0, 5, 9]] > 0).all()
    syms = np.array([5, 0, 9, 5], np.uint8)
    assert np.array_equal(model.decode(Reader(model.encode(syms), "f"), 4, np.dtype(np.uint8)), syms)


def test_corrupt_frames_raise_codec_error(rng: np.random.Generator) -> None:
    syms = rng.integers(0, 40, 5000).astype(np.uint8)
    model = AnsModel.from_counts(np.bincount(syms, minlength=256))
    body = model.encode(syms)
    with pytest.raises(CodecError, match="whole number of 32-bit words"):
        model.decode(Reader(body[:-1], "f"), syms.size, np.dtype(np.uint8))
    with pytest.raises(CodecError, match="corrupt ANS frame"):
        model.decode(Reader(body + b"\x01\x00\x00\x00", "f"), syms.size, np.dtype(np.uint8))
    with pytest.raises(CodecError, match="corrupt ANS frame"):
        model.decode(Reader(body[: len(body) // 2], "f"), syms.size, np.dtype(np.uint8))


@pytest.mark.parametrize(
    "lo, n, weights, message",
    [
        (250, 10, np.ones(10, np.uint32), "invalid ANS model range"),
        (0, 1, np.ones(1, np.uint32), "invalid ANS model range"),
        (0, 4, np.zeros(4, np.uint32), "zero total weight"),
        (0, 4, np.ones(3, np.uint32), "exactly 4 weights"),
    ],
)
def test_bad_model_tables_are_rejected(lo: int, n: int, weights: np.ndarray, message: str) -> None:
    import zlib

    z = zlib.compress(weights.astype("<u4").tobytes())
    raw = np.array([lo, n, len(z)], "<u4").tobytes() + z
    with pytest.raises(CodecError, match=message):
        AnsModel.read(Reader(raw, "params"), 256)
