"""BitFit: the exchanged vector is the bias (and norm) parameters only, averaged like any parameter slice.

The PS holds just those; the frozen weights never reach it. A master's Θ0 that holds a weight matrix
is refused: it would mean the client and the federation disagree on the paradigm.
"""

from __future__ import annotations

from ...global_model import Manifest
from .delta_averaging import DeltaAveraging


class BitFit(DeltaAveraging):
    """The weighted mean of the bias (and norm) vectors; a Θ0 holding a matrix is refused."""

    def check_manifest(self, manifest: Manifest) -> None:
        for t in manifest:
            if len(t.shape) != 1:
                raise ValueError(f"bitfit exchanges vectors only, but the manifest holds {t.name} {list(t.shape)}")
