"""Automatic bit-width choice from the measured link rate (paper §III-B3: "chosen from the link rate")."""

from __future__ import annotations

import math

from geofed.codec.errors import CodecError

INT16_HUFFMAN_BYTES_PER_PARAM = 1.3
"""Planning estimate for an int16+huffman push: the synthetic GPT-2-small delta in docs/benchmarks.md
codes to 7.7 bits/param, Student-t noise at a single scale to ~9.8 (it fills more of the 65536 levels);
1.3 bytes = 10.4 bits covers both plus framing."""


def choose_codec(link_bytes_per_s: float, numel: int, budget_s: float) -> str:
    """Return "int16" if an int16+huffman push of `numel` params fits `budget_s` at this rate, else "int8".

    int16 has 256x finer steps than int8, so prefer it whenever the link can carry it in time.
    """
    if math.isnan(link_bytes_per_s) or link_bytes_per_s <= 0:
        raise CodecError(f"link_bytes_per_s must be positive, got {link_bytes_per_s}")
    if numel < 0:
        raise CodecError(f"numel must be >= 0, got {numel}")
    if math.isnan(budget_s) or budget_s <= 0:
        raise CodecError(f"budget_s must be positive, got {budget_s}")
    seconds = numel * INT16_HUFFMAN_BYTES_PER_PARAM / link_bytes_per_s
    return "int16" if seconds <= budget_s else "int8"


def codec_choice(link_bytes_per_s: float | None, numel: int, budget_s: float) -> tuple[str, str]:
    """`choose_codec`'s answer and its reason in words (the client logs it whenever its choice changes).

    Before any upload has been timed there is no rate to plan with: int8, the smallest, until one is.
    """
    if link_bytes_per_s is None:
        return "int8", "no upload timed yet: int8 until one is"
    name = choose_codec(link_bytes_per_s, numel, budget_s)
    seconds = numel * INT16_HUFFMAN_BYTES_PER_PARAM / link_bytes_per_s
    verdict = "within" if name == "int16" else "over"
    return name, (f"an int16+huffman push of {numel} values would take ~{seconds:.3g} s at the measured "
                  f"{link_bytes_per_s / 1e6:.3g} MB/s, {verdict} sync_time_budget_s={budget_s:g}")
