"""RAVAN: W + (α/r)·Σᵢ sᵢ Bᵢ Hᵢ Aᵢ per wrapped layer; W, Aᵢ, Bᵢ frozen and shared, Hᵢ and sᵢ trained.

Aᵢ (r × in) and Bᵢ (out × r) are drawn from `seed` on every client alike (bit-identical across machines),
so they are "shared once" without a byte on the wire; the heads Hᵢ (r × r, zero at start) are the exchanged
vector, uploaded as sᵢHᵢ with each head's trainable scaling sᵢ folded in. Averaging heads is exact: the
update Σᵢ Bᵢ Hᵢ Aᵢ is linear in the heads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .lora import AdapterSettings


class RavanSettings(AdapterSettings):
    """Multi-head low-rank adaptation with frozen random projections."""

    name: Literal["ravan"] = Field(
        "ravan", description="RAVAN: train r × r heads Hᵢ and per-head scalings sᵢ; exchange sᵢHᵢ only."
    )
    heads: int = Field(4, ge=1, le=64, description="Number of heads (Aᵢ, Hᵢ, Bᵢ) per wrapped layer.")
    seed: int = Field(0, ge=0, le=2**63 - 1,
                      description="Seed of the frozen projections Aᵢ, Bᵢ (same on every client).")
