"""How a client and the PS word a frozen digest that is not the federation's (one text on both sides)."""

from __future__ import annotations


def frozen_mismatch(client: str, federation: str) -> str:
    """The refusal of a client whose frozen part's sha256 `client` is not the federation's `federation`."""
    return (
        f"the client's frozen part (the base model and fixed projections it builds but never exchanges) has "
        f"sha256 {client} but the federation's has sha256 {federation}: build it from the same model.path (or "
        "seeded init) and paradigm settings"
    )
