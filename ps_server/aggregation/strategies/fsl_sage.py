"""FSL-SAGE, server half at the PS: the client-side part of a split model, averaged like any parameters.

The PS never sees the server-side blocks (a separate trainer process holds them) nor the clients'
auxiliary models (private); it federates the embeddings, first blocks, final norm and head.
"""

from __future__ import annotations

from ...global_model import Manifest
from .delta_averaging import DeltaAveraging


class FslSage(DeltaAveraging):
    """The weighted mean of the client-side part of the split model; a Θ0 holding server-side blocks is refused."""

    def check_manifest(self, manifest: Manifest) -> None:
        cut = self.fed.paradigm.cut_layer
        beyond = [t.name for t in manifest if t.name.startswith("transformer.h.")
                  and int(t.name.split(".")[2]) >= cut]
        if beyond:
            raise ValueError(f"the client part holds blocks at or after the cut ({cut}): {beyond[:3]}; the "
                             "server-side blocks and the auxiliary model never reach the PS")
