"""The Gaussian mechanism's arithmetic, shared by the PS (central noise) and the clients (local noise)."""

from __future__ import annotations

import numpy as np

NOISE_SLICE = 1 << 22  # elements of noise drawn at once: temporaries stay O(slice), not O(model)


def add_gaussian_(values: np.ndarray, std: float, rng: np.random.Generator) -> None:
    """values += N(0, std²) element-wise, in place (float32), drawn slice by slice."""
    flat = values.reshape(-1)
    for i in range(0, flat.size, NOISE_SLICE):
        piece = flat[i : i + NOISE_SLICE]
        piece += rng.standard_normal(piece.size, dtype=np.float32) * np.float32(std)


def clip_and_noise(
    delta: np.ndarray, clip_norm: float, noise_multiplier: float, rng: np.random.Generator
) -> np.ndarray:
    """A new float32 vector: `delta` scaled to L2 norm at most `clip_norm`, plus N(0, (σ·C)²) per element."""
    norm = float(np.linalg.norm(delta.astype(np.float64)))
    scale = clip_norm / norm if norm > clip_norm else 1.0
    out = (delta.astype(np.float64) * scale).astype(np.float32)
    add_gaussian_(out, noise_multiplier * clip_norm, rng)
    return out
