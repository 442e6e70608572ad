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
