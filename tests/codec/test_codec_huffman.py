"""Huffman stage: optimal length-limited codes, canonical tables, lossless lane coding, corrupt input."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geofed.codec.errors import CodecError
from geofed.codec.header import Reader
from geofed.codec.huffman import HuffmanCode, code_lengths
from geofed.codec.huffman_lanes import LaneEncoder, decode_lanes


def huffman_cost(counts: np.ndarray) -> int:
    """Total coded bits of an unrestricted Huffman code (reference: sum of all merge weights)."""
    heap = [int(c) for c in counts if c > 0]
    if len(heap) < 2:
        return sum(heap)
    heapq.heapify(heap)
    cost = 0
    while len(heap) > 1:
        merged = heapq.heappop(heap) + heapq.heappop(heap)
        cost += merged
        heapq.heappush(heap, merged)
    return cost


def lane_roundtrip(lengths: np.ndarray, syms: np.ndarray, lane_syms: int, limit: int) -> tuple[np.ndarray, bytes]:
    code = HuffmanCode(lengths, limit)
    body = LaneEncoder(code, lane_syms, syms.size).encode(syms)
    return decode_lanes(code, Reader(body, "frame"), syms.size, lane_syms), body


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=2, max_size=300))
def test_package_merge_matches_huffman_when_the_limit_does_not_bind(counts: list[int]) -> None:
    """With a generous limit, package-merge lengths cost exactly what Huffman's do."""
    c = np.array(counts, dtype=np.int64)
    lengths = code_lengths(c, limit=24)
    if np.count_nonzero(c) >= 2:
        assert int((lengths.astype(np.int64) * c).sum()) == huffman_cost(c)
    assert (lengths[c == 0] == 0).all() and (lengths[c > 0] > 0).all()


@pytest.mark.parametrize("limit", [8, 12, 16])
def test_length_limit_is_respected_and_code_is_complete(limit: int) -> None:
    """Fibonacci counts make Huffman's deepest tree (39-bit codes); the limit caps them, Kraft sum stays 1."""
    fib = [1, 1]
    while len(fib) < 40:
        fib.append(fib[-1] + fib[-2])
    counts = np.array(fib, dtype=np.int64)
    assert code_lengths(counts, 64).max() == 39
    lengths = code_lengths(counts, limit)
    assert lengths.max() == limit
    assert sum(2.0 ** -int(v) for v in lengths if v) == pytest.approx(1.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=2, max_size=6), st.integers(0, 2))
def test_package_merge_is_optimal_under_a_binding_limit(counts: list[int], slack: int) -> None:
    """Brute force over every length assignment with lengths <= limit and Kraft sum <= 1."""
    n = len(counts)
    limit = max(1, int(np.ceil(np.log2(n)))) + slack
    c = np.array(counts, dtype=np.int64)
    grid = np.stack(np.meshgrid(*[np.arange(1, limit + 1)] * n, indexing="ij"), -1).reshape(-1, n)
    feasible = (2.0**-grid).sum(axis=1) <= 1.0
    best = int((grid[feasible] * c).sum(axis=1).min())
    lengths = code_lengths(c, limit)
    assert lengths.max() <= limit
    assert int((lengths.astype(np.int64) * c).sum()) == best


def test_limit_costs_little_on_heavy_tailed_symbols(rng: np.random.Generator) -> None:
    """int8's 16-bit limit on Student-t symbols (rare tail codes want ~20 bits) costs < 0.1%."""
    syms = np.clip(np.rint(rng.standard_t(3.0, 1_000_000) * 2 + 128), 0, 255).astype(np.int64)
    counts = np.bincount(syms, minlength=256)
    assert code_lengths(counts, 64).max() > 16
    limited = int((code_lengths(counts, 16).astype(np.int64) * counts).sum())
    assert huffman_cost(counts) <= limited <= 1.001 * huffman_cost(counts)


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.integers(0, 255), min_size=1, max_size=3000),
    lane_syms=st.sampled_from([2, 4, 7, 64, 100, 1000]),  # odd sizes take the unpaired path
)
def test_int8_lanes_are_lossless(data: list[int], lane_syms: int) -> None:
    syms = np.array(data, dtype=np.uint8)
    counts = np.bincount(syms, minlength=256)
    if np.count_nonzero(counts) < 2:
        counts[(int(syms[0]) + 1) % 256] = 1  # a real code needs two symbols; the stage special-cases one
    out, _ = lane_roundtrip(code_lengths(counts, 16), syms, lane_syms, 16)
    assert np.array_equal(out, syms)


@settings(max_examples=40, deadline=None)
@given(data=st.lists(st.integers(0, 65535), min_size=2, max_size=3000), lane_syms=st.sampled_from([3, 64, 511]))
def test_int16_lanes_are_lossless(data: list[int], lane_syms: int) -> None:
    syms = np.array(data, dtype=np.uint16)
    counts = np.bincount(syms, minlength=65536)
    if np.count_nonzero(counts) < 2:
        counts[(int(syms[0]) + 1) % 65536] = 1
    out, _ = lane_roundtrip(code_lengths(counts, 20), syms, lane_syms, 20)
    assert np.array_equal(out, syms)


def test_skewed_int16_alphabet_uses_long_codes_losslessly(rng: np.random.Generator) -> None:
    """Heavy tails over all 65536 symbols push rare codes to the 20-bit limit."""
    distance = np.abs(np.arange(65536) - 32768)
    counts = np.maximum(1, 3e5 * 0.8**distance).astype(np.int64)  # every symbol used at least once
    syms = rng.permutation(np.repeat(np.arange(65536, dtype=np.uint16), counts))
    assert code_lengths(counts, 64).max() > 20
    lengths = code_lengths(counts, 20)
    assert lengths.max() == 20
    out, body = lane_roundtrip(lengths, syms, 512, 20)
    assert np.array_equal(out, syms)
    mean_bits = (lengths.astype(np.int64) * counts).sum() / counts.sum()
    assert len(body) * 8 / syms.size < mean_bits + 0.1  # lane lengths cost < 0.1 bit per symbol


def test_canonical_codes_are_prefix_free_and_ordered() -> None:
    lengths = np.zeros(256, np.uint8)
    lengths[[3, 7, 9, 200]] = [1, 2, 3, 3]
    code = HuffmanCode(lengths, 16)
    got = {s: int(code.aligned[s] >> np.uint64(64 - lengths[s])) for s in (3, 7, 9, 200)}
    assert got == {3: 0b0, 7: 0b10, 9: 0b110, 200: 0b111}


@pytest.mark.parametrize(
    "lengths, message",
    [
        ({0: 1, 1: 1, 2: 1}, "Kraft sum"),
        ({0: 17, 1: 1}, "exceeds the limit 16"),
        ({}, "no symbol has a code"),
    ],
)
def test_invalid_code_lengths_are_rejected(lengths: dict[int, int], message: str) -> None:
    table = np.zeros(256, np.uint8)
    for s, n in lengths.items():
        table[s] = n
    with pytest.raises(CodecError, match=message):
        HuffmanCode(table, 16)


def test_corrupt_bitstream_is_detected(rng: np.random.Generator) -> None:
    """Flipping any single bit of the stream makes some lane miss its stored end."""
    syms = np.minimum(rng.geometric(0.4, 5000), 200).astype(np.uint8)
    lengths = code_lengths(np.bincount(syms, minlength=256), 16)
    code = HuffmanCode(lengths, 16)
    body = LaneEncoder(code, 64, syms.size).encode(syms)
    header_bytes = 5 + body[4] * -(-syms.size // 64)  # u32 base, u8 width, one offset per lane
    detected = 0
    for bit in rng.choice((len(body) - header_bytes) * 8, 200, replace=False):
        bad = bytearray(body)
        bad[header_bytes + bit // 8] ^= 0x80 >> (bit % 8)
        try:
            out = decode_lanes(code, Reader(bytes(bad), "frame"), syms.size, 64)
        except CodecError as exc:
            assert "corrupt Huffman" in str(exc)
            detected += 1
        else:
            assert not np.array_equal(out, syms)  # a flip that re-synchronises still changes symbols
    assert detected >= 150


def test_lane_length_table_is_checked(rng: np.random.Generator) -> None:
    syms = rng.integers(0, 4, 1000).astype(np.uint8)
    code = HuffmanCode(code_lengths(np.bincount(syms, minlength=256), 16), 16)
    body = bytearray(LaneEncoder(code, 64, syms.size).encode(syms))
    bad = body.copy()
    bad[0:4] = (60000).to_bytes(4, "little")
    with pytest.raises(CodecError, match="impossible for its symbol count"):
        decode_lanes(code, Reader(bytes(bad), "frame"), syms.size, 64)
    bad = body.copy()
    bad[4] = 3
    with pytest.raises(CodecError, match="lane-length width 3"):
        decode_lanes(code, Reader(bytes(bad), "frame"), syms.size, 64)
    with pytest.raises(CodecError, match="truncated"):
        decode_lanes(code, Reader(bytes(body[:10]), "frame"), syms.size, 64)


@pytest.mark.parametrize("lane_syms, width", [(64, 1), (512, 2), (10_000, 4)])
def test_lane_length_width_adapts_to_the_spread(lane_syms: int, width: int) -> None:
    """Lanes of 1-bit codes next to lanes of 16-bit codes need wider stored lengths, and still decode."""
    counts = np.zeros(256, np.int64)
    counts[0], counts[1:] = 1 << 40, 1  # symbol 0: 1 bit; the rest: 8-16 bits
    syms = np.zeros(4 * lane_syms, np.uint8)
    if width > 1:
        syms[2 * lane_syms : 3 * lane_syms] = np.arange(lane_syms) % 255 + 1
    else:
        syms[::7] = 5
    code = HuffmanCode(code_lengths(counts, 16), 16)
    body = LaneEncoder(code, lane_syms, syms.size).encode(syms)
    assert body[4] == width
    assert np.array_equal(decode_lanes(code, Reader(body, "frame"), syms.size, lane_syms), syms)
