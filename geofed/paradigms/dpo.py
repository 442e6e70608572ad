"""Federated DPO (Rafailov et al., 2023): LoRA adapters trained on preference pairs, exchanged like LoRA's.

Each client learns from (prompt, chosen, rejected) records. The reference policy is the frozen base every
client builds alike (the model with its adapters off), so a pair's reference log-probabilities are
computed once on the client and cached, never sent. The PS aggregates the adapters exactly as LoRA's
strategy does (`separate` or `product`): DPO changes the local objective, not what is exchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from .lora import ADAPTER_PRESET, AdapterSettings


class DPOSettings(AdapterSettings):
    """DPO on LoRA adapters: the policy is base + adapters, the reference the base alone."""

    transformers_model: ClassVar[bool] = True  # peft wraps the model

    name: Literal["dpo"] = Field("dpo", description="Direct preference optimisation on LoRA adapters.")
    client_half: ClassVar[str] = "client_agent.paradigms.dpo:DPO"
    strategies: ClassVar[Mapping[str, str]] = {"dense": "ps_server.aggregation.strategies.lora:LoRA"}
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "dpo": {"paradigm": {**ADAPTER_PRESET, "beta": 0.1}, "training": {"lr": 2e-3}},
    }
    local_task: ClassVar[str] = "geofed_apps.finetune.preference:PreferenceTask"
    beta: float = Field(
        0.1, gt=0, le=100,
        description="β: how far the policy may move from the reference; the loss's implicit reward is "
        "β·(log π(y|x) − log π_ref(y|x)).",
    )
    loss: Literal["sigmoid", "ipo"] = Field(
        "sigmoid",
        description="sigmoid: DPO's −log σ(β·margin); ipo: IPO's (margin − 1/(2β))², margin being the chosen's "
        "log-ratio minus the rejected's.",
    )
    aggregation: Literal["separate", "product"] = Field(
        "separate",
        description="As LoRA's: separate averages A and B on their own (FedIT); product averages the products "
        "BA exactly and re-factorises to rank r.",
    )

    def folds_as_mean(self) -> bool:
        return self.aggregation == "separate"
