"""Shared helpers for the codec tests: encode/decode round trips through the public API."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.codec import Codec, decoder_for


def roundtrip(codec: Codec, x: np.ndarray, frame_elems: int = 4096, pieces: list[bytes] | None = None):
    """(decoded values, header, payload) for `x`; feeds `pieces` if given, else the frames one by one."""
    header, frames = codec.encode(x, frame_elems=frame_elems)
    frames = list(frames)
    dec = decoder_for(header, max_numel=x.size)
    out = np.full(x.size, np.nan, dtype=np.float32)
    for piece in frames if pieces is None else pieces:
        for off, vals in dec.feed(piece):
            out[off : off + vals.size] = vals
    dec.finish()
    return out, header, b"".join(frames)


def heavy_tailed(n: int, seed: int = 0, scale: float = 1e-3) -> np.ndarray:
    """Student-t(3) noise, the shape of a real training delta."""
    return (np.random.default_rng(seed).standard_t(3.0, n) * scale).astype(np.float32)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
