"""The client half of local differential privacy: clip the round's update to C and add N(0, (σ·C)²) to it
before it is encoded (`geofed.privacy.settings`, mode 'local').

The codec and its error feedback then see the noised update only: the residual a quantiser leaves is the
noised update's (e = noised δ + e − what was sent), so everything that leaves the site, now or carried into a
later round, is computed from noised updates (post-processing). Computing the residual against the
un-noised δ instead would carry −noise into the next round and undo it there.
"""

from __future__ import annotations

import logging

import numpy as np

from geofed.privacy.noise import clip_and_noise
from geofed.privacy.settings import PrivacyConfig

log = logging.getLogger("geofed.client")

_SOLVED: dict[str, float] = {}  # settings JSON -> σ (solving a target ε runs the accountant)


def local_noise(privacy: PrivacyConfig, delta: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """The update to encode: `delta` itself, or under local DP a new clipped and noised vector."""
    if not (privacy.enabled and privacy.mode == "local"):
        return delta
    key = privacy.model_dump_json()
    if key not in _SOLVED:
        from geofed.privacy.accountant import solve_noise_multiplier  # dp-accounting: only under local DP

        _SOLVED[key] = solve_noise_multiplier(privacy)
    log.info(
        "event=local_noise clip=%.4g noise_multiplier=%.4g norm=%.4g",
        privacy.clip_norm,
        _SOLVED[key],
        float(np.linalg.norm(delta.astype(np.float64))),
    )
    return clip_and_noise(delta, privacy.clip_norm, _SOLVED[key], rng or np.random.default_rng())


def refuse_slice_wise(privacy: PrivacyConfig) -> None:
    """Local DP clips the whole update's norm: the slice-wise path, where each rank encodes its own slice, does
    not take it (ValueError)."""
    if privacy.enabled and privacy.mode == "local":
        raise ValueError(
            "privacy mode 'local' clips the site's whole update, which the slice-wise sync path (each "
            "rank encoding its own slice) does not hold: run the site on one rank, or use mode 'central'"
        )
