"""The PS half of `tests.plugins.biases`: the weighted mean of the bias vectors, as for any parameters."""

from __future__ import annotations

from ps_server.aggregation.strategies.delta_averaging import DeltaAveraging
from ps_server.global_model import Manifest


class Biases(DeltaAveraging):
    """`DeltaAveraging` over the biases; a Θ0 holding anything else is refused."""

    def check_manifest(self, manifest: Manifest) -> None:
        for t in manifest:
            if not t.name.endswith(".bias"):
                raise ValueError(f"biases exchanges bias vectors only, but the manifest holds {t.name}")
