"""Min-max quantisation: error within half a step (global and per block), exact residuals, edge ranges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from geofed.codec import make_codec
from geofed.codec import quantize as qz

from .conftest import heavy_tailed, roundtrip

finite32 = st.floats(-(2.0**100), 2.0**100, allow_nan=False, width=32)


def bound(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, bits: int) -> np.ndarray:
    """Half a step plus float32 rounding of the dequantised value; a range whose step would be subnormal
    (hi - lo < ~3e-36) decodes everything to its midpoint, so there the bound is the range itself."""
    step = (hi.astype(np.float64) - lo) / qz.qmax(bits)
    mag = np.maximum(np.abs(lo), np.abs(hi)).astype(np.float64)
    half_step = 0.5 * step * (1 + 1e-5) + 4 * np.finfo(np.float32).eps * mag + 1e-45
    return np.where(step < np.finfo(np.float32).tiny, hi.astype(np.float64) - lo + 1e-45, half_step)


@pytest.mark.parametrize("bits", [8, 16])
@settings(max_examples=40, deadline=None)
@given(x=arrays(np.float32, st.integers(1, 3000), elements=finite32))
def test_global_error_is_at_most_half_a_step(bits: int, x: np.ndarray) -> None:
    out, _, _ = roundtrip(make_codec(f"int{bits}", "none"), x, frame_elems=512)
    lo, hi = np.float32(x.min()), np.float32(x.max())
    err = np.abs(out.astype(np.float64) - x)
    assert (err <= bound(x, np.array(lo), np.array(hi), bits)).all()


@pytest.mark.parametrize("bits, block", [(8, 64), (8, 100), (16, 1000)])
def test_per_block_error_is_at_most_half_the_blocks_step(bits: int, block: int) -> None:
    x = heavy_tailed(20_011, seed=bits + block)
    x[5000:5100] *= 1e4  # one loud block must not coarsen the others
    out, _, _ = roundtrip(make_codec(f"int{bits}", "huffman", block), x, frame_elems=1777)
    lo, hi = qz.block_ranges(x, block)
    per = np.repeat(np.arange(lo.size), block)[: x.size]
    err = np.abs(out.astype(np.float64) - x)
    assert (err <= bound(x, lo[per], hi[per], bits)).all()


def test_per_block_beats_global_on_heavy_tails() -> None:
    x = heavy_tailed(200_000, seed=3)
    glob, _, _ = roundtrip(make_codec("int8", "none"), x, frame_elems=65536)
    blk, _, _ = roundtrip(make_codec("int8", "none", 4096), x, frame_elems=65536)
    assert np.linalg.norm(blk - x) < 0.5 * np.linalg.norm(glob - x)


@pytest.mark.parametrize("value", [0.0, -3.5, 1e30, -1e-40])
def test_constant_input_is_exact(value: float) -> None:
    x = np.full(1000, value, dtype=np.float32)
    for codec in (make_codec("int8"), make_codec("int16", "ans"), make_codec("int8", "huffman", 64)):
        out, _, _ = roundtrip(codec, x, frame_elems=300)
        assert np.array_equal(out, x)


def test_constant_input_costs_no_payload_bits_with_huffman() -> None:
    x = np.zeros(100_000, np.float32)
    _, _, payload = roundtrip(make_codec("int8"), x, frame_elems=50_000)
    assert len(payload) == 2 * 20  # two frame prefixes, empty bodies


def test_extreme_range_does_not_overflow() -> None:
    x = np.array([-3e38, 3e38, 0.0, 1.0, -2.9e38], dtype=np.float32)
    for bits in (8, 16):
        out, _, _ = roundtrip(make_codec(f"int{bits}", "none"), x)
        assert np.isfinite(out).all()
        assert (np.abs(out.astype(np.float64) - x) <= bound(x, x.min(), x.max(), bits)).all()


@pytest.mark.parametrize("name", ["int8+huffman", "int16+ans", "int8+none/b64", "bf16", "fp32"])
def test_residual_is_exactly_input_minus_decoded(name: str) -> None:
    base, _, rest = name.partition("+")
    entropy, _, block = rest.partition("/b")
    codec = make_codec(base, entropy or "huffman", int(block or 0))
    x = heavy_tailed(10_007, seed=9)
    residual = np.full_like(x, np.nan)
    header, frames = codec.encode(x, frame_elems=999, residual_out=residual)
    from geofed.codec import decoder_for

    dec = decoder_for(header, max_numel=x.size)
    out = np.concatenate([v for f in frames for _, v in dec.feed(f)])
    dec.finish()
    assert np.array_equal(residual, x - out)


def test_symbols_use_the_full_range() -> None:
    """min maps to symbol 0 and max to 2^bits - 1, so no code is wasted."""
    x = np.array([-1.0, 0.25, 3.0], np.float32)
    lo, hi = qz.global_range(x)
    mid, _, inv = qz.steps(np.array([lo]), np.array([hi]), 8)
    q = qz.quantize_into(x, mid[0], inv[0], 8, np.empty(3, np.float32), np.empty(3, np.uint8))
    assert q[0] == 0 and q[-1] == 255


def test_pair_histogram_matches_bincount(rng: np.random.Generator) -> None:
    for n in (0, 1, 2, 1001):
        q = rng.integers(0, 256, n).astype(np.uint8)
        counts = np.zeros(256, np.int64)
        qz.add_histogram(counts, q)
        assert np.array_equal(counts, np.bincount(q, minlength=256))
