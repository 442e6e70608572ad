"""RAVAN: W + (α/r)·Σᵢ sᵢ Bᵢ Hᵢ Aᵢ per wrapped layer; W, Aᵢ, Bᵢ frozen and shared, Hᵢ and sᵢ trained.

Aᵢ (r × in) and Bᵢ (out × r) are drawn from `seed` on every client alike, orthonormal as the RAVAN paper's
Gram-Schmidt initialisation (the heads' subspaces orthogonal to each other), so they are "shared once"
without a byte on the wire (a client whose draw differs is refused at Join); the heads Hᵢ (r × r, zero at
start) are the exchanged vector, uploaded as sᵢHᵢ with each head's trainable scaling sᵢ folded in.
Averaging heads is exact: the update Σᵢ Bᵢ Hᵢ Aᵢ is linear in the heads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from .lora import ADAPTER_PRESET, AdapterSettings


class RavanSettings(AdapterSettings):
    """Multi-head low-rank adaptation with frozen random projections."""

    name: Literal["ravan"] = Field(
        "ravan", description="RAVAN: train r × r heads Hᵢ and per-head scalings sᵢ; exchange sᵢHᵢ only."
    )
    client_half: ClassVar[str] = "client_agent.paradigms.ravan:Ravan"
    strategies: ClassVar[Mapping[str, str]] = {"dense": "ps_server.aggregation.strategies.ravan:Ravan"}
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "ravan": {"paradigm": {**ADAPTER_PRESET, "heads": 4}, "training": {"lr": 1e-2}},
        # RAVAN at LoRA's budget, as its paper compares them: 8 heads of 32 × 32 exchange 8192 numbers per wrapped
        # layer; over the built-in base's layers that is LoRA's rank 16 × (in + out) in total (the scalings sᵢ
        # add 8 per layer, trained, not exchanged); α = r, so the update is the paper's Σᵢ sᵢBᵢHᵢAᵢ, unscaled.
        "ravan-matched": {"paradigm": {"rank": 32, "alpha": 32.0, "heads": 8}, "training": {"lr": 1e-2}},
    }
    heads: int = Field(4, ge=1, le=64, description="Number of heads (Aᵢ, Hᵢ, Bᵢ) per wrapped layer.")
    seed: int = Field(0, ge=0, le=2**63 - 1,
                      description="Seed of the frozen projections Aᵢ, Bᵢ (same on every client).")
