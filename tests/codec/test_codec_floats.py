"""fp32 and bf16 pass-through codecs: bit-exact fp32, bf16 rounding identical to torch's."""

from __future__ import annotations

import numpy as np
import torch

from geofed.codec import make_codec

from .conftest import heavy_tailed, roundtrip


def test_fp32_round_trips_bit_exactly_including_specials(rng: np.random.Generator) -> None:
    x = rng.standard_normal(10_000).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, -0.0, np.finfo(np.float32).tiny / 2, np.finfo(np.float32).max]
    x.view(np.uint32)[6] = 0x7FC01234  # a NaN payload survives too
    out, _, payload = roundtrip(make_codec("fp32"), x, frame_elems=4096)
    assert np.array_equal(out.view(np.uint32), x.view(np.uint32))
    assert len(payload) == 4 * x.size + 20 * 3


def test_bf16_matches_torch_rounding(rng: np.random.Generator) -> None:
    x = np.concatenate([heavy_tailed(50_000), rng.standard_normal(50_000).astype(np.float32) * 1e30])
    x[:4] = [np.inf, -np.inf, np.finfo(np.float32).max, -0.0]
    out, _, payload = roundtrip(make_codec("bf16"), x, frame_elems=30_000)
    expected = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    assert np.array_equal(out.view(np.uint32), expected.view(np.uint32))
    assert len(payload) == 2 * x.size + 20 * 4


def test_bf16_keeps_nan_as_nan() -> None:
    x = np.array([np.nan, 1.0, -np.nan], np.float32)
    x.view(np.uint32)[2] = 0xFFFFFFFF  # all-ones NaN would overflow a naive rounding add
    out, _, _ = roundtrip(make_codec("bf16"), x)
    assert np.isnan(out[[0, 2]]).all() and out[1] == 1.0


def test_bf16_relative_error_is_within_half_an_ulp() -> None:
    x = heavy_tailed(20_000)
    x = x[x != 0]
    out, _, _ = roundtrip(make_codec("bf16"), x)
    assert (np.abs(out - x) <= np.abs(x) * 2.0**-8).all()


def test_float_codecs_ignore_entropy_and_blocks() -> None:
    assert make_codec("bf16", "ans", 4096).name == "bf16"
    assert make_codec("fp32", "none").name == "fp32"
