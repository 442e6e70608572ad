"""Pretraining (paper §III-C1): the identity reparametrisation; every parameter is trained and exchanged."""

from __future__ import annotations

import numpy as np

from geofed.codec.sparse_increments import apply_chain

from .base import ClientParadigm, DownlinkDecoder

SPARSE_DELTA = "sparse_delta"  # ps_server.aggregation.sparse_downlink's encoding (codec 'sparse')


def _sparse_delta(held: np.ndarray, data: bytes, base_version: int, version: int) -> np.ndarray:
    """The held version plus the PS's sparse increments up to `version`, added exactly as the PS added them."""
    return apply_chain(held, data)


class Pretrain(ClientParadigm):
    """All of ClientParadigm's defaults: ϕ = θ; the sparse mode's model stream is decoded here."""

    def downlink_decoders(self) -> dict[str, DownlinkDecoder]:
        return {SPARSE_DELTA: _sparse_delta}
