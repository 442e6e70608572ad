"""'auto' takes bf16 only when 2 bytes/param fit the budget and the delta's outliers make it finer than int16."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.codec import CodecError, make_codec
from geofed.codec.policy import BF16_RANGE_TO_RMS, choose_codec, codec_choice, delta_range_to_rms

from .conftest import roundtrip


def test_bf16_needs_both_the_link_and_the_outliers():
    numel, budget = 1_000_000, 10.0
    # 2 MB at 1 MB/s = 2 s, within 10 s; range 600 x rms >= 512: bf16.
    assert choose_codec(1e6, numel, budget, 600.0) == "bf16"
    assert choose_codec(1e6, numel, budget, 100.0) == "int16"  # a tame delta: int16 is finer
    assert choose_codec(1e6, numel, budget, None) == "int16"  # not measured: never bf16
    # At 150 kB/s bf16 takes 13.3 s (over 10), int16+huffman 8.7 s (within): int16 however wild the delta.
    assert choose_codec(1.5e5, numel, budget, 600.0) == "int16"


def test_bf16_boundaries():
    numel, budget = 1_000_000, 10.0
    assert BF16_RANGE_TO_RMS == 65535 / 128  # int16 step range/65535 = bf16's 2^-7 x rms
    assert choose_codec(1e6, numel, budget, BF16_RANGE_TO_RMS) == "bf16"
    assert choose_codec(1e6, numel, budget, BF16_RANGE_TO_RMS * 0.999) == "int16"
    exact = numel * 2.0 / budget  # 200 kB/s carries 2 MB in exactly 10 s
    assert choose_codec(exact, numel, budget, 600.0) == "bf16"
    assert choose_codec(exact * 0.999, numel, budget, 600.0) == "int16"


def test_bf16_choice_says_why():
    name, reason = codec_choice(1e6, 1_000_000, 10.0, 600.0)
    assert name == "bf16" and "~2 s" in reason and "range is 600 x its rms" in reason


def test_range_to_rms_by_hand():
    assert delta_range_to_rms(np.array([-1, 1, -1, 1], dtype=np.float32)) == pytest.approx(2.0)
    # rms of [3, 4] = sqrt(12.5) = 3.5355; range 1.
    assert delta_range_to_rms(np.array([3, 4], dtype=np.float32)) == pytest.approx(1 / 12.5 ** 0.5, rel=1e-6)
    assert delta_range_to_rms(np.zeros(3, dtype=np.float32)) is None
    assert delta_range_to_rms(np.zeros(0, dtype=np.float32)) is None
    with pytest.raises(CodecError, match="range_to_rms"):
        choose_codec(1e6, 10, 1.0, -1.0)


@pytest.mark.parametrize("outlier", [0.0, 5000.0])
def test_the_threshold_picks_the_codec_that_errs_less(outlier):
    # Independent check of the crossover with the real codecs: a Gaussian delta (range ~10 rms) and the same
    # with one huge outlier (range ~1000 rms). The policy's pick must be the codec with the smaller error.
    x = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
    x[123] = outlier or x[123]
    errors = {name: float(np.mean((roundtrip(make_codec(name, "none"), x)[0] - x) ** 2)) for name in ("int16", "bf16")}
    picked = choose_codec(1e12, x.size, 1.0, delta_range_to_rms(x))
    assert picked == min(errors, key=errors.get), (picked, errors, delta_range_to_rms(x))
