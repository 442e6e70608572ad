"""How much each delta counts: tokens, staleness, FedNova normalisation, norm clipping."""

from __future__ import annotations

import math

from geofed.config import AggregationConfig


def staleness_factor(staleness: int, exponent: float) -> float:
    """Polynomial down-weighting (1 + s)^-a of a delta s versions behind (FedAsync / FedBuff)."""
    return (1.0 + max(0, staleness)) ** -exponent


def base_weight(cfg: AggregationConfig, num_tokens: int) -> float:
    """Weight before staleness: tokens processed (paper: by data volume) or 1."""
    if cfg.weighting == "uniform":
        return 1.0
    return float(max(1, num_tokens))


def clip_scale(norm: float, clip_norm: float) -> float:
    """Factor that brings a delta's L2 norm down to `clip_norm` (1 when clipping is off or not needed)."""
    if clip_norm <= 0 or not math.isfinite(norm) or norm <= clip_norm:
        return 1.0
    return clip_norm / norm


def delta_scale(cfg: AggregationConfig, weight: float, local_steps: int) -> float:
    """Multiplier for a delta in the running sum; FedNova divides by its local step count τ."""
    if cfg.fednova:
        return weight / max(1, local_steps)
    return weight
