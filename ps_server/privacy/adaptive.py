"""Adaptive clipping (Andrew et al. 2021, "Differentially Private Learning with Adaptive Clipping").

After each round the PS moves C towards the `target_quantile` of the sites' update norms from a noised count
of the updates that were within C: each site adds bᵢ − ½ with bᵢ = 1[‖δᵢ‖ ≤ C] (so one site moves the sum by
at most ½), b̄ = (Σᵢ (bᵢ − ½) + N(0, σ_b²)) / n + ½ and C ← C · exp(−η (b̄ − γ)), the geometric update of the
paper's Algorithm 1 (as TensorFlow Privacy's QuantileAdaptiveClipSumQuery centres it). The count is a
Gaussian mechanism of its own, of noise multiplier 2σ_b; the accountant composes it with the update's.
"""

from __future__ import annotations

import math

import numpy as np


class AdaptiveClip:
    """C of the round now open and the count of its unclipped updates."""

    def __init__(
        self, clip_norm: float, target_quantile: float, lr: float, count_noise: float, rng: np.random.Generator
    ) -> None:
        self.clip_norm = clip_norm
        self.quantile, self.lr, self.count_noise, self.rng = target_quantile, lr, count_noise, rng
        self.unclipped = 0  # updates of the open round within C

    def observe(self, norm: float) -> None:
        """One site's update norm (before clipping) went into the open round."""
        if norm <= self.clip_norm:
            self.unclipped += 1

    def round_closed(self, sites: int) -> float:
        """Update C from the noised unclipped fraction of a round of `sites` updates; the new C."""
        if sites > 0:
            centred = self.unclipped - sites / 2.0 + float(self.rng.normal(0.0, self.count_noise))
            noised = centred / sites + 0.5
            self.clip_norm *= math.exp(-self.lr * (noised - self.quantile))
        self.unclipped = 0
        return self.clip_norm
