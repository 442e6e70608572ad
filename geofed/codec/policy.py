"""Automatic bit-width choice from the measured link rate (paper §III-B3: "chosen from the link rate").

int8 < int16 in bytes and in error. bf16 costs 2 bytes/param (no entropy stage) and is *not* finer than
int16 in general: int16's one global step is range / 65535, bf16's is at most 2^-7 |x| (8 significant bits).
bf16's error is the smaller only when the delta's range is at least `BF16_RANGE_TO_RMS` times its rms (heavy
outliers stretch int16's grid), so 'auto' takes bf16 only then, and only when 2 bytes/param fit the budget.
"""

from __future__ import annotations

import math

import numpy as np

from geofed.codec.errors import CodecError

INT16_HUFFMAN_BYTES_PER_PARAM = 1.3
"""Planning estimate for an int16+huffman push: the synthetic GPT-2-small delta in docs/benchmarks.md
codes to 7.7 bits/param, Student-t noise at a single scale to ~9.8 (it fills more of the 65536 levels);
1.3 bytes = 10.4 bits covers both plus framing."""


BF16_BYTES_PER_PARAM = 2.0
"""A bf16 push: 16 bits a value, no entropy stage (geofed.codec.floats)."""

BF16_RANGE_TO_RMS = 65535 / 2**7
"""Range/rms above which bf16's error is below int16's: int16's step range/65535 against bf16's worst-case
spacing 2^-7 |x| at |x| = rms (both errors uniform within a step, so the step sizes compare the rms errors)."""


def choose_codec(link_bytes_per_s: float, numel: int, budget_s: float, range_to_rms: float | None = None) -> str:
    """Return "int16" if an int16+huffman push of `numel` params fits `budget_s` at this rate, else "int8";
    "bf16" instead of int16 when a bf16 push fits too and the delta's `range_to_rms` (max - min over rms)
    is at least `BF16_RANGE_TO_RMS` (None: not measured, never bf16).

    int16 has 256x finer steps than int8, so prefer it whenever the link can carry it in time.
    """
    if math.isnan(link_bytes_per_s) or link_bytes_per_s <= 0:
        raise CodecError(f"link_bytes_per_s must be positive, got {link_bytes_per_s}")
    if numel < 0:
        raise CodecError(f"numel must be >= 0, got {numel}")
    if math.isnan(budget_s) or budget_s <= 0:
        raise CodecError(f"budget_s must be positive, got {budget_s}")
    if range_to_rms is not None and (math.isnan(range_to_rms) or range_to_rms < 0):
        raise CodecError(f"range_to_rms must be >= 0, got {range_to_rms}")
    if (range_to_rms is not None and range_to_rms >= BF16_RANGE_TO_RMS
            and numel * BF16_BYTES_PER_PARAM / link_bytes_per_s <= budget_s):
        return "bf16"
    seconds = numel * INT16_HUFFMAN_BYTES_PER_PARAM / link_bytes_per_s
    return "int16" if seconds <= budget_s else "int8"


def codec_choice(link_bytes_per_s: float | None, numel: int, budget_s: float,
                 range_to_rms: float | None = None) -> tuple[str, str]:
    """`choose_codec`'s answer and its reason in words (the client logs it whenever its choice changes).

    Before any upload has been timed there is no rate to plan with: int8, the smallest, until one is.
    """
    if link_bytes_per_s is None:
        return "int8", "no upload timed yet: int8 until one is"
    name = choose_codec(link_bytes_per_s, numel, budget_s, range_to_rms)
    if name == "bf16":
        seconds = numel * BF16_BYTES_PER_PARAM / link_bytes_per_s
        return name, (f"a bf16 push of {numel} values would take ~{seconds:.3g} s at the measured "
                      f"{link_bytes_per_s / 1e6:.3g} MB/s, within sync_time_budget_s={budget_s:g}, and the delta's "
                      f"range is {range_to_rms:.4g} x its rms (>= {BF16_RANGE_TO_RMS:g}: bf16 errs less than int16)")
    seconds = numel * INT16_HUFFMAN_BYTES_PER_PARAM / link_bytes_per_s
    verdict = "within" if name == "int16" else "over"
    return name, (f"an int16+huffman push of {numel} values would take ~{seconds:.3g} s at the measured "
                  f"{link_bytes_per_s / 1e6:.3g} MB/s, {verdict} sync_time_budget_s={budget_s:g}")


def delta_range_to_rms(values: np.ndarray) -> float | None:
    """(max - min) / rms of a delta, what `choose_codec` weighs bf16 by; None when empty, all zero or not finite.

    One BLAS dot for the rms (no float64 copy of a model-sized vector).
    """
    if values.size == 0:
        return None
    rms = float(np.linalg.norm(values)) / math.sqrt(values.size)
    if rms == 0 or not math.isfinite(rms):
        return None
    return (float(values.max()) - float(values.min())) / rms
