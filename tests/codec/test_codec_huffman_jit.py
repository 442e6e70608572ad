"""The compiled Huffman coder writes and reads exactly the numpy coder's bytes, and catches the same damage."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.codec import huffman_jit
from geofed.codec.entropy import HuffmanStage
from geofed.codec.errors import CodecError
from geofed.codec.header import Reader

FRAME = 1 << 16


def _symbols(bits: int, n: int, seed: int, spread: float) -> np.ndarray:
    x = np.random.default_rng(seed).standard_t(3.0, n) * spread
    if bits == 8:
        return x.clip(-127, 127).astype(np.int8).view(np.uint8)
    return x.clip(-32767, 32767).astype(np.int16).view(np.uint16)


def _frames(stage: HuffmanStage, syms: np.ndarray, coder: str, monkeypatch) -> list[bytes]:
    monkeypatch.setenv("GEOFED_HUFFMAN", coder)
    enc = stage.encoder(FRAME)
    return [enc(syms[a : a + FRAME]) for a in range(0, syms.size, FRAME)]


def _decoded(stage: HuffmanStage, frames: list[bytes], n: int, coder: str, monkeypatch) -> np.ndarray:
    monkeypatch.setenv("GEOFED_HUFFMAN", coder)
    return np.concatenate([stage.decode(Reader(f, "frame"), min(FRAME, n - i * FRAME)) for i, f in enumerate(frames)])


CASES = [  # (bits, symbols, spread): int8 pairs, odd lengths, lanes not a multiple of four, int16's large tables
    (8, 200_001, 6.0),
    (8, 1_001, 0.7),
    (8, 65_536 * 3 + 7, 40.0),
    (16, 100_003, 2000.0),
    (16, 513, 3.0),
]


@pytest.mark.parametrize(("bits", "n", "spread"), CASES)
def test_compiled_and_numpy_coders_write_identical_bytes_and_read_each_other(bits, n, spread, monkeypatch):
    # Prepare
    syms = _symbols(bits, n, seed=n, spread=spread)
    stage = HuffmanStage.build(bits, np.bincount(syms, minlength=1 << bits), FRAME)
    assert huffman_jit._numba_present(), "numba is a dependency: the compiled coder must be installed"

    # Execute
    compiled = _frames(stage, syms, "numba", monkeypatch)
    reference = _frames(stage, syms, "numpy", monkeypatch)

    # Assert
    assert compiled == reference
    assert np.array_equal(_decoded(stage, compiled, n, "numba", monkeypatch), syms)
    assert np.array_equal(_decoded(stage, compiled, n, "numpy", monkeypatch), syms)


@pytest.mark.parametrize("coder", ["numba", "numpy"])
def test_both_coders_refuse_a_damaged_bitstream(coder, monkeypatch):
    syms = _symbols(8, 50_000, seed=1, spread=6.0)
    stage = HuffmanStage.build(8, np.bincount(syms, minlength=256), FRAME)
    frame = bytearray(_frames(stage, syms, "numpy", monkeypatch)[0])
    frame[len(frame) // 2] ^= 0x5A  # inside the bitstream: some lane no longer ends on its boundary

    with pytest.raises(CodecError, match="corrupt Huffman"):
        _decoded(stage, [bytes(frame)], syms.size, coder, monkeypatch)


def test_the_switch_selects_the_numpy_coder(monkeypatch):
    monkeypatch.setenv("GEOFED_HUFFMAN", "numpy")
    assert not huffman_jit.enabled()
    monkeypatch.setenv("GEOFED_HUFFMAN", "")
    assert huffman_jit.enabled()
