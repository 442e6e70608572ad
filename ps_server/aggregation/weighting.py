"""How much each delta counts: tokens (server-vouched), staleness, FedNova normalisation, norm clipping."""

from __future__ import annotations

import math

from geofed.config import AggregationConfig, FederationConfig


def staleness_factor(staleness: int, exponent: float) -> float:
    """Polynomial down-weighting (1 + s)^-a of a delta s versions behind (FedAsync / FedBuff)."""
    return (1.0 + max(0, staleness)) ** -exponent


def base_weight(cfg: AggregationConfig, num_tokens: int, local_steps: int = 1) -> float:
    """Weight before staleness: tokens processed (paper: by data volume) or 1.

    With FedNova the weight p_i must not grow with the local step count τ_i (Wang et al. 2020, eq. 7:
    p_i is the client's data share): tokens grow with τ_i, so FedNova weighs tokens *per local step*,
    which leaves the τ-normalisation to do its work instead of reducing FedNova to plain FedAvg.
    """
    if cfg.weighting == "uniform":
        return 1.0
    tokens = float(max(1, num_tokens))
    return tokens / max(1, local_steps) if cfg.fednova else tokens


def max_tokens_per_sync(fed: FederationConfig) -> int:
    """The most tokens one sync can honestly hold: batch × sequence length × maximum local steps.

    The server vouches for a delta's weight with this, not with the client's word: a declared count
    above it (2⁶⁴ − 1, say) is credited as this much, so no client buys influence over a round.
    """
    return fed.training.batch_size * fed.model.block_size * fed.training.local_steps


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
