"""RAVAN: the exchanged vector is every layer's heads Hᵢ (r × r each), averaged like any parameter slice.

Clients upload sᵢHᵢ, their trainable per-head scalings folded in, so the global heads are the mean of the
scaled heads and every client starts its next round from sᵢ = 1. Averaging the heads is exact, unlike LoRA's
A and B: the layer's update Σᵢ Bᵢ Hᵢ Aᵢ is linear in the heads and Aᵢ, Bᵢ are the same on every client, so
the mean of the clients' updates is the update of the mean heads.
"""

from __future__ import annotations

from ...global_model import Manifest
from .delta_averaging import DeltaAveraging


class Ravan(DeltaAveraging):
    """The weighted mean of the heads RAVAN exchanges; a Θ0 holding anything else is refused."""

    def check_manifest(self, manifest: Manifest) -> None:
        for t in manifest:
            if not t.name.endswith("ravan_H") or len(t.shape) != 3 or t.shape[1] != t.shape[2]:
                raise ValueError(f"ravan exchanges r × r heads only, but the manifest holds {t.name} {list(t.shape)}")
