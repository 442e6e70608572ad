"""The client's one-pass decode of a model difference (`grid_apply`) ends on the PS's published vector, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from client_agent.connection import grid_apply
from geofed.codec import huffman_jit
from geofed.codec import model_delta as md
from geofed.codec.errors import CodecError
from geofed.codec.header import Reader

needs_numba = pytest.mark.skipif(not huffman_jit.enabled(), reason="the one-pass decode is numba's; without it "
                                 "grid_apply.decode is model_delta.decode (tested in tests/codec)")


def _published(true: np.ndarray, prev: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    exps = md.choose_exponents(true, prev[0] if prev else None, prev[1] if prev else None, 8.0)
    return md.snap_to_grid(true, exps), exps


def _two_versions(n: int, step: float, seed: int = 0):
    """Two published versions `step` apart (relative to the grid the first one sets)."""
    rng = np.random.default_rng(seed)
    first = _published(rng.normal(0, 0.02, n).astype(np.float32), None)
    moved = (first[0] + rng.standard_t(3.0, n) * step).astype(np.float32)
    return first, _published(moved, first)


def _levels(payload: bytes, numel: int) -> int:
    """How many 7-bit byte streams the payload holds (read from its layout, independently of any decoder)."""
    r = Reader(payload, "t")
    _, _, _, block, _ = r.unpack(md._HEAD.format, "h")
    r.take(2 * md.blocks_of(numel, block), "exps")
    count = 0
    while r.remaining:
        n, plen = r.unpack("<II", "stream")
        r.take(plen, "params")
        for _ in range(-(-n // md.FRAME)):
            (blen,) = r.unpack("<I", "frame")
            r.take(blen, "frame")
        count += 1
    return count


@needs_numba
@pytest.mark.parametrize(("step", "min_levels"), [(1e-5, 1), (1e-3, 2), (3e-1, 3)])
def test_one_pass_decode_ends_on_the_published_vector_at_every_level_count(step, min_levels):
    """Small and large moves (1, 2, 3+ byte streams per value): the new published vector comes out bit for bit."""
    # Prepare: a size that is not a whole number of grid blocks or frames
    (have, have_exps), (new, new_exps) = _two_versions(3 * md.GRID_BLOCK + 777, step)
    payload = md.encode(have, have_exps, new, new_exps)
    assert payload is not None
    assert _levels(payload, new.size) >= min_levels

    # Execute
    got = grid_apply.decode(have, payload)

    # Assert: against the vector the PS published (not against another decoder)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), new.view(np.uint32))


@needs_numba
def test_a_whole_vector_sent_as_its_difference_from_zeros_comes_out_whole():
    (new, exps), _ = _two_versions(50_000, 0.0)
    payload = md.encode(np.zeros_like(new), exps, new, exps)

    got = grid_apply.decode(np.zeros_like(new), payload)

    assert np.array_equal(got.view(np.uint32), new.view(np.uint32))


@needs_numba
def test_a_difference_that_decodes_beyond_the_exact_fp32_limit_is_refused():
    """A crafted payload whose value needs 4 levels of 7 bits set reads past D_LIMIT: CodecError, as numpy's."""
    (have, have_exps), _ = _two_versions(1000, 0.0)
    big = np.full(have.size, np.uint8(255))
    last = np.full(have.size, np.uint8(127))
    header = md._HEAD.pack(md.MAGIC, md.VERSION, have.size, md.GRID_BLOCK, md.FRAME)
    streams = [md._encode_stream(s, md.FRAME) for s in (big, big, big, last)]
    payload = b"".join([header, have_exps.astype("<i2").tobytes(), *streams])

    with pytest.raises(CodecError, match="too large"):
        md.decode(have, payload)
    with pytest.raises(CodecError, match="too large"):
        grid_apply.decode(have, payload)


def test_truncated_or_foreign_payloads_raise_codec_errors():
    (have, have_exps), (new, new_exps) = _two_versions(20_000, 1e-3)
    payload = md.encode(have, have_exps, new, new_exps)

    with pytest.raises(CodecError):
        grid_apply.decode(have, payload[: len(payload) // 2])
    with pytest.raises(CodecError, match="not a model delta"):
        grid_apply.decode(have, b"XXXX" + payload[4:])
    with pytest.raises(CodecError, match="held model has"):
        grid_apply.decode(have[:-1], payload)


def test_without_numba_it_is_the_numpy_decoder(monkeypatch):
    """GEOFED_HUFFMAN=numpy switches the compiled passes off: the same vector from model_delta's numpy path."""
    monkeypatch.setenv("GEOFED_HUFFMAN", "numpy")
    (have, have_exps), (new, new_exps) = _two_versions(20_000, 1e-3)
    payload = md.encode(have, have_exps, new, new_exps)

    got = grid_apply.decode(have, payload)

    assert np.array_equal(got.view(np.uint32), new.view(np.uint32))
