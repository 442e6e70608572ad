"""Running weighted sum of client deltas: memory O(model), never O(clients × model)."""

from __future__ import annotations

import numpy as np


class DeltaAccumulator:
    """Σ_c scale_c·δ_c accumulated slice by slice as each delta is decoded.

    The mean divides by Σ w_c, the deltas' base weights (tokens); a staleness factor is part of scale_c
    only, so a stale delta counts less instead of being renormalised back to full strength (FedBuff).

    With FedNova the scale is w_c/τ_c and `step_mass` tracks Σ w_c·τ_c, so the mean delta can be
    rescaled by the effective step count τ_eff = Σ w_c τ_c / Σ w_c (Wang et al., FedNova).
    """

    def __init__(self, numel: int) -> None:
        self.numel = numel
        self.sum = np.zeros(numel, dtype=np.float32)  # calloc: pages appear only when touched
        self.weight = 0.0
        self.mass = 0.0  # Σ scale_c·‖δ_c‖: bounds every |sum| element (triangle inequality), so overflow is seen early
        self.step_mass = 0.0
        self.count = 0
        self.clients: set[str] = set()

    def add(self, offset: int, values: np.ndarray, scale: float) -> None:
        """Add `scale * values` at `offset` (one decoded piece of one delta)."""
        end = offset + values.size
        if offset < 0 or end > self.numel:
            raise ValueError(f"delta piece [{offset}, {end}) outside model of {self.numel} elements")
        self.sum[offset:end] += np.float32(scale) * values

    def commit(self, client_id: str, weight: float, local_steps: int) -> None:
        """Record that one whole delta with `weight` went into the sum."""
        self.weight += weight
        self.step_mass += weight * max(1, local_steps)
        self.count += 1
        self.clients.add(client_id)

    def mean_(self, fednova: bool) -> np.ndarray:
        """Turn the sum into the weighted mean delta in place and return it (the buffer is consumed)."""
        if self.weight <= 0:
            raise ValueError("no weight accumulated")
        factor = 1.0 / self.weight
        if fednova:
            factor *= self.step_mass / self.weight
        self.sum *= np.float32(factor)
        return self.sum

    def close(self) -> None:
        """Nothing to release: the sum buffer goes on as the round's update."""
