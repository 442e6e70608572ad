"""Every Huffman lane coder present (C in both kernel builds, numba, numpy) writes the numpy coder's bytes, reads
them back, and treats damaged input exactly as the numpy coder does: the same CodecError, never a crash."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.codec import huffman_backend, huffman_c
from geofed.codec.errors import CodecError
from geofed.codec.header import Reader
from geofed.codec.huffman import LENGTH_LIMIT, HuffmanCode, code_lengths
from geofed.codec.huffman_lanes import LaneEncoder, decode_lanes


def _variants() -> list[str]:
    """Coder names for GEOFED_HUFFMAN, with the C coder once per kernel build this CPU can run."""
    out = []
    for coder in huffman_backend.available():
        if coder == "c":
            out.append("c/portable")
            if huffman_c._ext.isa("best") != "portable":
                out.append(f"c/{huffman_c._ext.isa()}")
        else:
            out.append(coder)
    return out


VARIANTS = _variants()


@pytest.fixture
def use(monkeypatch):
    """use(variant): select a coder (and the C kernel build) for the rest of the test."""

    def select(variant: str) -> None:
        coder, _, isa = variant.partition("/")
        monkeypatch.setenv("GEOFED_HUFFMAN", coder)
        if coder == "c":
            huffman_c._ext.isa(isa)

    yield select
    if huffman_c.built():
        huffman_c._ext.isa("best")


def _encode(code: HuffmanCode, syms: np.ndarray, lane_syms: int) -> bytes:
    return LaneEncoder(code, lane_syms, max(1, syms.size)).encode(syms)


def _decode(code: HuffmanCode, body: bytes, count: int, lane_syms: int) -> np.ndarray:
    return decode_lanes(code, Reader(body, "frame"), count, lane_syms)


def _outcome(code: HuffmanCode, body: bytes, count: int, lane_syms: int) -> tuple[str, object]:
    """("ok", symbols) or ("error", message): what a decoder made of `body`."""
    try:
        return "ok", _decode(code, body, count, lane_syms).tolist()
    except CodecError as exc:
        return "error", str(exc)


def _fibonacci_counts(n: int) -> np.ndarray:
    """Counts whose Huffman tree is as deep as possible, so the length limit binds (longest code = limit)."""
    fib = [1, 1]
    while len(fib) < n:
        fib.append(min(fib[-1] + fib[-2], 1 << 40))
    return np.array(fib, dtype=np.int64)


def _case(name: str) -> tuple[HuffmanCode, np.ndarray, int]:
    """(code, symbols, lane_syms) for a named input; symbols are drawn from the code's alphabet."""
    rng = np.random.default_rng(abs(hash(name)) % (1 << 32))
    if name.startswith("int8-t"):  # the shape of a real delta
        n, lane = {"int8-t": (50_001, 26), "int8-t-big-lanes": (9_999, 2_000)}[name]
        syms = (rng.standard_t(3.0, n) * 6).clip(-127, 127).astype(np.int8).view(np.uint8)
        bits = 8
    elif name.startswith("int16-t"):
        n, lane = {"int16-t": (40_003, 64), "int16-t-odd-lanes": (7_777, 33)}[name]
        syms = (rng.standard_t(3.0, n) * 2000).clip(-32767, 32767).astype(np.int16).view(np.uint16)
        bits = 16
    elif name in ("int8-max-length", "int16-max-length"):  # codes of the limit's length, every symbol used
        bits = 8 if name.startswith("int8") else 16
        alphabet = 40 if bits == 8 else 300
        counts = np.zeros(1 << bits, np.int64)
        counts[rng.permutation(1 << bits)[:alphabet]] = _fibonacci_counts(alphabet)
        lengths = code_lengths(counts, LENGTH_LIMIT[bits])
        assert lengths.max() == LENGTH_LIMIT[bits]
        used = np.flatnonzero(lengths)
        syms = np.concatenate([used, rng.choice(used, 5_000)]).astype(np.uint8 if bits == 8 else np.uint16)
        rng.shuffle(syms)
        return HuffmanCode(lengths, LENGTH_LIMIT[bits]), syms, 64
    elif name == "int16-short-codes":  # a few very common int16 symbols: codes under 11 bits take the direct path
        bits = 16
        syms = np.where(rng.random(20_000) < 0.9, rng.integers(0, 6, 20_000), rng.integers(0, 65_536, 20_000))
        syms = syms.astype(np.uint16)
        lane = 100
    elif name == "one-symbol":  # a one-symbol alphabet: a 1-bit code, half the code space unused
        lengths = np.zeros(256, np.uint8)
        lengths[77] = 1
        return HuffmanCode(lengths, 16), np.full(1_001, 77, np.uint8), 64
    elif name == "two-symbols":
        bits, lane = 8, 7
        syms = rng.choice(np.array([3, 250], np.uint8), 999)
    elif name.startswith("tiny-"):  # frames of 1-3 symbols, fewer than a lane
        bits, lane = 8, 64
        syms = rng.integers(0, 5, int(name[-1])).astype(np.uint8)
    elif name == "lanes-of-one":
        bits, lane = 8, 1
        syms = rng.integers(0, 30, 301).astype(np.uint8)
    else:
        raise AssertionError(name)
    lengths = code_lengths(np.bincount(syms, minlength=1 << bits), LENGTH_LIMIT[bits])
    return HuffmanCode(lengths, LENGTH_LIMIT[bits]), syms, lane


CASES = [
    "int8-t", "int8-t-big-lanes", "int16-t", "int16-t-odd-lanes", "int8-max-length", "int16-max-length",
    "int16-short-codes", "one-symbol", "two-symbols", "tiny-1", "tiny-2", "tiny-3", "lanes-of-one",
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_coder_writes_the_numpy_coders_bytes_and_reads_them(variant, case, use):
    # Prepare
    code, syms, lane = _case(case)
    use("numpy")
    reference = _encode(code, syms, lane)

    # Execute
    use(variant)
    body = _encode(code, syms, lane)
    decoded = _decode(code, reference, syms.size, lane)

    # Assert
    assert body == reference
    assert decoded.dtype == syms.dtype
    assert np.array_equal(decoded, syms)


def _damaged(body: bytes, rng: np.random.Generator) -> list[bytes]:
    """Bit flips all over the body, truncations, extra bytes, garbage of the right size."""
    out = []
    for _ in range(60):
        bad = bytearray(body)
        for pos in rng.integers(0, len(body), rng.integers(1, 4)):
            bad[pos] ^= 1 << int(rng.integers(0, 8))
        out.append(bytes(bad))
    out += [body[:k] for k in (0, 3, 5, len(body) // 2, len(body) - 1)]
    out += [body + b"\0", body + b"\xff" * 9]
    out += [rng.integers(0, 256, len(body), dtype=np.uint8).tobytes() for _ in range(10)]
    lanes_field = bytearray(body)
    lanes_field[0:4] = (1 << 31).to_bytes(4, "little")  # an impossible lane length
    out.append(bytes(lanes_field))
    return out


@pytest.mark.parametrize(
    "case", ["int8-t", "int16-t-odd-lanes", "int8-max-length", "int16-max-length", "one-symbol", "tiny-3"]
)
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "numpy"])
def test_damaged_input_gets_the_numpy_coders_verdict(variant, case, use):
    """Same error message or same symbols as the numpy coder (the reference) on every damaged body."""
    code, syms, lane = _case(case)
    use("numpy")
    body = _encode(code, syms, lane)
    rng = np.random.default_rng(7)
    bodies = _damaged(body, rng)
    expected = [_outcome(code, b, syms.size, lane) for b in bodies]

    use(variant)
    got = [_outcome(code, b, syms.size, lane) for b in bodies]

    assert got == expected
    assert all(kind == "error" for kind, _ in got[60:67])  # a cut or lengthened body is always refused


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_symbol_without_a_code_is_refused(variant, use):
    code, syms, lane = _case("two-symbols")
    bad = syms.copy()
    bad[500] = 4  # not in the code's alphabet
    use(variant)
    with pytest.raises(CodecError, match="no Huffman code"):
        _encode(code, bad, lane)


@pytest.mark.parametrize("variant", VARIANTS)
def test_an_empty_frame_is_refused(variant, use):
    """No coder writes a frame of zero symbols (the framing never asks for one)."""
    code, _, lane = _case("two-symbols")
    use(variant)
    with pytest.raises((CodecError, ValueError)):
        _encode(code, np.zeros(0, np.uint8), lane)


def test_the_install_builds_the_c_coder():
    assert huffman_c.built(), "`pip install -e .` compiles geofed/codec/_huffman_c.c (setup.py): no C compiler?"


def test_the_fastest_present_coder_is_the_default_and_each_can_be_forced(monkeypatch):
    code, syms, lane = _case("two-symbols")
    monkeypatch.delenv("GEOFED_HUFFMAN", raising=False)
    assert huffman_backend.backend() == huffman_backend.available()[0]
    assert huffman_backend.available()[-1] == "numpy"
    for coder in huffman_backend.available():
        monkeypatch.setenv("GEOFED_HUFFMAN", coder)
        assert LaneEncoder(code, lane, syms.size).coder == coder


def test_forcing_a_missing_or_unknown_coder_is_an_error(monkeypatch):
    monkeypatch.setattr(huffman_c, "_ext", None)  # as on a machine where the install had no compiler
    monkeypatch.delenv("GEOFED_HUFFMAN", raising=False)
    assert huffman_backend.backend() != "c"
    monkeypatch.setenv("GEOFED_HUFFMAN", "c")
    with pytest.raises(CodecError, match="not present"):
        huffman_backend.backend()
    monkeypatch.setenv("GEOFED_HUFFMAN", "fortran")
    with pytest.raises(CodecError, match="expected one of"):
        huffman_backend.backend()


@pytest.mark.skipif(not huffman_c.built(), reason="the C coder's own decode loops")
def test_the_cases_run_both_c_decode_loops():
    """Short codes (int8 deltas) take the five-symbols-per-read loop, int16's long codes the plain one: both are
    covered by the byte-identity and damage tests above."""
    assert huffman_c.coder_for(_case("int8-t")[0]).more
    assert not huffman_c.coder_for(_case("int16-t")[0]).more


@pytest.mark.skipif(not huffman_c.built(), reason="the C coder's 16-bit first table")
@pytest.mark.parametrize("isa", ["portable", "best"])
def test_int16_codes_up_to_24_bits_decode_through_the_length_search(isa):
    """int16's first-table entries hold delta + 2^23 in 24 bits; codes as long as the C coder allows (24 bits, longer
    than int16's limit of 20) have deltas below -2^23, so their prefixes must fall back to the length search.
    Lengths 1..11 once each, then 8192 codes of 24 bits: the last 11-bit prefix holds only 24-bit codes (a prefix
    that fixes the length, the usual entry, but whose delta does not fit). Checked against the symbols themselves
    (the numpy coder's 2^24-entry table is too big to build)."""
    rng = np.random.default_rng(24)
    lengths = np.zeros(1 << 16, np.uint8)
    order = rng.permutation(1 << 16)
    lengths[order[:11]] = np.arange(1, 12)
    lengths[order[11 : 11 + 8192]] = 24
    code = HuffmanCode(lengths, 24)
    used = np.flatnonzero(lengths)
    syms = np.concatenate([used, rng.choice(used, 20_000), np.repeat(order[:11], 500)]).astype(np.uint16)
    rng.shuffle(syms)
    coder = huffman_c.CCoder(code)
    search = (coder.prim & huffman_c.SEARCH16) != 0
    assert search[-1] and (coder.prim[-1] & 63) == 24  # the all-ones prefix: one length, delta out of range
    assert (~search).any()
    huffman_c._ext.isa(isa)
    try:
        body = coder.encode(syms, 64)
        decoded = coder.decode(Reader(body, "frame"), syms.size, 64)
    finally:
        huffman_c._ext.isa("best")
    assert np.array_equal(decoded, syms)
