"""The downlink's exact model differences: published grids, bit-identical reconstruction, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.codec import model_delta as md
from geofed.codec.errors import CodecError


def _trajectory(n: int, versions: int, seed: int = 0, step: float = 1e-4) -> list[np.ndarray]:
    """True models T_1..T_k: Θ0 plus heavy-tailed updates, the shape of an outer step."""
    rng = np.random.default_rng(seed)
    out = [rng.normal(0, 0.02, n).astype(np.float32)]
    for _ in range(versions - 1):
        out.append((out[-1] + rng.standard_t(3.0, n) * step).astype(np.float32))
    return out


def _publish(true: list[np.ndarray], steps: float = 8.0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    published, exps = [], []
    for t in true:
        e = md.choose_exponents(t, published[-1] if published else None, exps[-1] if exps else None, steps)
        published.append(md.snap_to_grid(t, e))
        exps.append(e)
    return published, exps


def test_every_held_version_reconstructs_the_newest_bit_for_bit():
    """A client holding any earlier published version ends with exactly the PS's newest, bit for bit."""
    # Prepare
    true = _trajectory(70_000, 8)
    published, exps = _publish(true)

    # Execute / Assert
    for have in range(1, 7):
        payload = md.encode(published[have], exps[have], published[7], exps[7])
        assert payload is not None
        got = md.decode(published[have], payload)
        assert got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), published[7].view(np.uint32)), f"held version {have}"


def test_a_difference_is_much_smaller_than_the_fp32_vector():
    """One version's difference codes to well under 8 bits per value (fp32 is 32)."""
    true = _trajectory(200_000, 3)
    published, exps = _publish(true)

    payload = md.encode(published[1], exps[1], published[2], exps[2])

    assert payload is not None and len(payload) * 8 / true[0].size < 8.0


def test_published_model_stays_within_half_a_grid_step_of_the_true_model_over_many_versions():
    """Rounding from the true model every version is error feedback: nothing accumulates."""
    true = _trajectory(40_000, 60, seed=3)
    published, exps = _publish(true)

    for t, p, e in zip(true, published, exps, strict=True):
        half_step = np.repeat(np.ldexp(0.5, e.astype(np.int32)), md.GRID_BLOCK)[: t.size]
        assert (np.abs(p.astype(np.float64) - t) <= half_step).all()
    drift = np.abs(published[-1].astype(np.float64) - true[-1])
    assert drift.max() < 1e-4 * 0.5  # within a fraction of one update, after 59 updates


def test_published_values_are_fp32_exact_grid_points_without_negative_zero():
    true = [np.array([-1e-9, 0.0, 3.0, -2.5e-3] * 5000, dtype=np.float32)]
    published, exps = _publish(true)

    scale = np.repeat(np.ldexp(1.0, exps[0].astype(np.int32)), md.GRID_BLOCK)[: true[0].size]
    ratio = published[0].astype(np.float64) / scale
    assert np.array_equal(ratio, np.rint(ratio))
    assert not np.signbit(published[0][published[0] == 0]).any()


def test_a_jump_too_large_for_exact_fp32_steps_is_refused_for_a_full_snapshot():
    """Values far apart on a fine grid cannot be an exact fp32 sum: encode says None (send the whole vector)."""
    fine = np.full(1, -60, np.int16)
    have = md.snap_to_grid(np.ones(1000, np.float32), fine)
    new = md.snap_to_grid(np.full(1000, 1000.0, np.float32), np.full(1, -10, np.int16))

    assert md.encode(have, fine, new, np.full(1, -10, np.int16)) is None


@pytest.mark.parametrize("cut", [0, 5, 20, -1])
def test_a_truncated_difference_is_a_codec_error(cut):
    true = _trajectory(30_000, 2)
    published, exps = _publish(true)
    payload = md.encode(published[0], exps[0], published[1], exps[1])

    with pytest.raises(CodecError):
        md.decode(published[0], payload[:cut])


def test_a_difference_for_another_model_size_is_refused():
    true = _trajectory(30_000, 2)
    published, exps = _publish(true)
    payload = md.encode(published[0], exps[0], published[1], exps[1])

    with pytest.raises(CodecError, match="held model"):
        md.decode(published[0][:-1], payload)


def test_compiled_and_numpy_passes_write_the_same_bytes_and_the_same_vector(monkeypatch):
    """GEOFED_HUFFMAN=numpy switches the difference passes to numpy as well: same payload, same result."""
    true = _trajectory(50_000, 3, seed=9)
    published, exps = _publish(true)
    out = {}
    for coder in ("", "numpy"):
        monkeypatch.setenv("GEOFED_HUFFMAN", coder)
        payload = md.encode(published[1], exps[1], published[2], exps[2])
        out[coder] = (payload, md.decode(published[1], payload))

    assert out[""][0] == out["numpy"][0]
    assert np.array_equal(out[""][1].view(np.uint32), out["numpy"][1].view(np.uint32))
    assert np.array_equal(out[""][1].view(np.uint32), published[2].view(np.uint32))


def test_compiled_and_numpy_passes_publish_the_same_grid_vector(monkeypatch):
    true = _trajectory(70_000, 2, seed=4)
    got = {}
    for coder in ("", "numpy"):
        monkeypatch.setenv("GEOFED_HUFFMAN", coder)
        published, exps = _publish(true)
        got[coder] = (published[-1], exps[-1])

    assert np.array_equal(got[""][1], got["numpy"][1])
    assert np.array_equal(got[""][0].view(np.uint32), got["numpy"][0].view(np.uint32))
