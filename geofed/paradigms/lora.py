"""Federated LoRA (FedIT; Zhang et al., 2024): W + (α/r)·BA, only A and B trained and exchanged.

Averaging A and B separately is not averaging BA (the mean of products is not the product of means).
`aggregation: product` makes the PS average the clients' products BA exactly, step them with the outer
optimizer, re-factorise to rank r (a truncated SVD, the best rank-r approximation) and carry what rank r
cannot hold into the next round; `separate` is FedIT's plain averaging.
`target_modules` and `rank` are checked against the model family here when the model is built from
config, and against the real layers on every client before it trains. Unset, `target_modules` is the
architecture's default, as peft picks it by `model_type` (`DEFAULT_TARGETS` here for the families geofed
builds; peft's table on the client for any other checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from .base import ParadigmSettings

# The layers each family's LoRA may wrap, and the smaller dimension of each, as a multiple of n_embd
# (every one is n_embd wide on one side, so the rank bound is n_embd for all of them).
FAMILY_LAYERS: dict[str, tuple[str, ...]] = {
    "gpt2": ("c_attn", "c_proj", "c_fc"),
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
}
# peft's default LoRA targets (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING) for these families.
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {"gpt2": ("c_attn",), "llama": ("q_proj", "v_proj")}
# The adapters the fine-tuning presets train (wrapped layers: the architecture's defaults, `target_modules`).
ADAPTER_PRESET: Mapping[str, Any] = {"rank": 16, "alpha": 32.0}


class AdapterSettings(ParadigmSettings):
    """What every low-rank adapter paradigm shares: rank, scale, dropout and the wrapped layers."""

    rank: int = Field(8, ge=1, le=4096, description="r: the adapters' rank; at most the wrapped layers' smaller side.")
    alpha: float = Field(16.0, gt=0, le=1e4, description="α: the adapter output is scaled by α / r.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter's input during training.")
    target_modules: list[str] | None = Field(
        None, min_length=1, max_length=64,
        description="Layer names to wrap (matched on the last name component, e.g. c_attn, c_proj, c_fc for "
        "gpt2; q_proj, v_proj for llama). Unset: the architecture's defaults as peft picks them (gpt2: c_attn; "
        "llama: q_proj, v_proj).",
    )

    @field_validator("target_modules")
    @classmethod
    def _names(cls, value: list[str] | None) -> list[str] | None:
        for name in value or ():
            if not name or not name.replace("_", "").replace(".", "").isalnum():
                raise ValueError(f"paradigm.target_modules: {name!r} is not a layer name")
        return value

    def targets(self, model_type: str) -> list[str]:
        """The layers to wrap in a `model_type` model: `target_modules` when set, else the family's default."""
        if self.target_modules:
            return list(self.target_modules)
        if model_type not in DEFAULT_TARGETS:
            raise ValueError(f"paradigm.target_modules: no default for a {model_type} model; name its layers")
        return list(DEFAULT_TARGETS[model_type])

    def check_model(self, model: Any) -> None:
        layers = FAMILY_LAYERS.get(model.family, ())
        missing = [t for t in self.targets(model.family) if t.rsplit(".", 1)[-1] not in layers]
        if missing:
            raise ValueError(f"paradigm.target_modules: {', '.join(missing)} is not a layer of a {model.family} "
                             f"model (its layers: {', '.join(layers)})")
        if model.path is None and self.rank > model.n_embd:
            raise ValueError(f"paradigm.rank {self.rank} is larger than the wrapped layers' smaller dimension "
                             f"(n_embd = {model.n_embd})")


class LoRASettings(AdapterSettings):
    """FedIT: clients train LoRA adapters on a frozen base and exchange only the adapters."""

    transformers_model: ClassVar[bool] = True  # peft wraps the model

    name: Literal["lora"] = Field("lora", description="Federated LoRA (FedIT): exchange only the adapters A, B.")
    client_half: ClassVar[str] = "client_agent.paradigms.lora:LoRA"
    strategies: ClassVar[Mapping[str, str]] = {"dense": "ps_server.aggregation.strategies.lora:LoRA"}
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "lora": {"paradigm": ADAPTER_PRESET, "training": {"lr": 2e-3}},
    }
    aggregation: Literal["separate", "product"] = Field(
        "separate",
        description="separate: average A and B on their own (FedIT); product: average the products BA exactly "
        "(clipped and stepped by the outer optimizer), re-factorise to rank r by truncated SVD and carry the "
        "remainder into the next round (server-side error feedback).",
    )

    def folds_as_mean(self) -> bool:
        return self.aggregation == "separate"  # product mode folds the products B·A, not a mean of the factors
