"""Hybrid LoRA: the exchanged vector is the base model, averaged as in pretraining.

The adapters are private to each client: a Θ0 whose manifest holds one is refused, so a client built
with another paradigm can never leak its adapters into the global model.
"""

from __future__ import annotations

from ...global_model import Manifest
from .delta_averaging import DeltaAveraging


class HybridLoRA(DeltaAveraging):
    """The weighted mean of the shared base; a Θ0 holding adapters (private to each client) is refused."""

    def check_manifest(self, manifest: Manifest) -> None:
        for t in manifest:
            if ".lora_A." in t.name or ".lora_B." in t.name:
                raise ValueError(f"hybrid-lora keeps adapters private, but the manifest holds {t.name}")
