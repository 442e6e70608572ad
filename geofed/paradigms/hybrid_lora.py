"""Hybrid LoRA (paper §III-C3): the base is exchanged as in pretraining; each client's adapters stay private.

A round runs `lora_steps` steps on the client's own adapters (base frozen), then `base_steps` steps on
the base (adapters frozen); only the base's δ goes to the PS. The adapters personalise the shared base
to the client's data; they never leave the client and ride in its checkpoint across preemption.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from .lora import ADAPTER_PRESET, AdapterSettings


class HybridLoRASettings(AdapterSettings):
    """Shared base, private per-client adapters."""

    transformers_model: ClassVar[bool] = True  # peft wraps the model

    name: Literal["hybrid-lora"] = Field(
        "hybrid-lora", description="Hybrid LoRA: base exchanged, adapters private to each client."
    )
    client_half: ClassVar[str] = "client_agent.paradigms.hybrid_lora:HybridLoRA"
    strategies: ClassVar[Mapping[str, str]] = {"dense": "ps_server.aggregation.strategies.hybrid_lora:HybridLoRA"}
    # Hybrid LoRA trains the whole base as well: the full model's rate (at LoRA's, the answers overfit).
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "hybrid-lora": {"paradigm": {**ADAPTER_PRESET, "lora_steps": 10, "base_steps": 10}, "training": {"lr": 5e-4}},
    }
    lora_steps: int = Field(10, ge=0, le=100_000, description="H_lora: steps on the private adapters per round.")
    base_steps: int = Field(10, ge=1, le=100_000, description="H_base: steps on the shared base per round.")
