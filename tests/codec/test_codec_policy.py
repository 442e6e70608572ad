"""Automatic int8/int16 choice from the link rate."""

from __future__ import annotations

import pytest

from geofed.codec import CodecError, choose_codec
from geofed.codec.policy import INT16_HUFFMAN_BYTES_PER_PARAM


@pytest.mark.parametrize(
    "rate, numel, budget, expected",
    [
        (100e6, 124_000_000, 60.0, "int16"),  # 161 MB at 100 MB/s: 1.6 s
        (1e6, 124_000_000, 60.0, "int8"),  # 161 MB at 1 MB/s: 161 s
        (float("inf"), 10**12, 1.0, "int16"),
        (1.0, 0, 1.0, "int16"),
    ],
)
def test_choice(rate: float, numel: int, budget: float, expected: str) -> None:
    assert choose_codec(rate, numel, budget) == expected


def test_threshold_is_the_estimated_push_time() -> None:
    numel, budget = 1_000_000, 10.0
    exact = numel * INT16_HUFFMAN_BYTES_PER_PARAM / budget
    assert choose_codec(exact, numel, budget) == "int16"
    assert choose_codec(exact * 0.999, numel, budget) == "int8"


@pytest.mark.parametrize(
    "args, message",
    [
        ((0.0, 10, 1.0), "link_bytes_per_s"),
        ((float("nan"), 10, 1.0), "link_bytes_per_s"),
        ((1.0, -1, 1.0), "numel"),
        ((1.0, 10, 0.0), "budget_s"),
    ],
)
def test_invalid_inputs(args: tuple, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        choose_codec(*args)


def test_the_auto_choice_comes_with_its_reason() -> None:
    from geofed.codec.policy import codec_choice

    assert codec_choice(None, 1000, 1.0) == ("int8", "no upload timed yet: int8 until one is")
    name, reason = codec_choice(1e6, 1_000_000, 10.0)  # 1.3 MB at 1 MB/s: 1.3 s, within 10 s
    assert name == "int16" and "~1.3 s" in reason and "1 MB/s" in reason and "within" in reason
    name, reason = codec_choice(1e5, 1_000_000, 10.0)  # 13 s, over 10 s
    assert name == "int8" and "~13 s" in reason and "over sync_time_budget_s=10" in reason
