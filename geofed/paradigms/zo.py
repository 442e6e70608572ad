"""Zeroth-order federated fine-tuning (MeZO/SPSA with shared seeds, as in FedKSeed).

For round v the PS and every client derive `seeds` directions zₖ from (`seed`, v, k) with numpy's Philox
(`geofed.zo`); a client returns one scalar per direction, gₖ = (L(θ+εzₖ) − L(θ−εzₖ)) / 2ε on its data; the
PS averages them and θ ← θ − lr·Σₖ ḡₖ zₖ / seeds. Clients that hold version v−1 receive just the ḡ's and apply
the same update themselves, so both directions carry O(seeds) bytes, not O(model).
`params: lora` perturbs LoRA adapters on the frozen base (MeZO on LoRA): the parameter set first-order
LoRA learns the task with, still one scalar per seed on the wire. The adapters' starting A (peft's
Kaiming-uniform draw) is the master's; the others adopt it with the first whole vector, as LoRA's do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from .lora import ADAPTER_PRESET, AdapterSettings

# What both presets push: the seeds' scalars as exact fp32, with no bound from recent norms (the update ceiling
# bounds them).
_SCALARS: Mapping[str, Any] = {
    "codec": {"name": "fp32", "entropy": "none", "error_feedback": False},
    "aggregation": {"norm_bound_multiple": 0.0},
}


class ZOSettings(AdapterSettings):
    """Seeds in, one scalar per seed out; rank, alpha and target_modules apply to `params: lora` only."""

    name: Literal["zo"] = Field("zo", description="Zeroth-order (MeZO/SPSA): exchange one scalar per seed.")
    client_half: ClassVar[str] = "client_agent.paradigms.zo:ZO"
    strategies: ClassVar[Mapping[str, str]] = {"dense": "ps_server.aggregation.strategies.zo:ZO"}
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "zo": {"paradigm": {"seeds": 32, "eps": 1e-3, "lr": 5e-3, "params": "bias"}, **_SCALARS},
        # MeZO on LoRA: the adapters first-order LoRA learns the task with, perturbed; still one scalar per seed.
        "zo-lora": {"paradigm": {**ADAPTER_PRESET, "seeds": 32, "eps": 1e-3, "lr": 1e-2, "params": "lora"},
                    **_SCALARS},
    }
    cumulative: ClassVar[bool] = False  # scalars along each round's own directions: their sum means nothing
    seeds: int = Field(16, description="Directions per round, each one scalar up and one down; at least 1.")
    eps: float = Field(1e-3, gt=0, le=1, description="ε: the perturbation scale of the two-point estimate.")
    lr: float = Field(1e-4, gt=0, le=10, description="Step size of the zeroth-order update on the PS and clients.")
    params: Literal["all", "bias", "lora"] = Field(
        "all", description="Parameters perturbed and exchanged: all, bias vectors and norms only (BitFit's set), "
        "or LoRA adapters of rank `rank` on `target_modules` (MeZO on LoRA), the base frozen.",
    )
    seed: int = Field(0, ge=0, le=2**63 - 1, description="Federation seed the per-round directions derive from.")
    history: int = Field(64, ge=1, le=100_000,
                         description="Versions of ḡ the PS keeps to bring a lagging client up to date by seeds.")

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, value: Any) -> Any:
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65536:
            raise ValueError(f"paradigm.seeds must be an integer from 1 to 65536 (directions per round), got {value!r}")
        return value

    def update_ceiling(self, model: Any) -> float:
        """Scalars, not parameters: each gₖ = (L(θ+εz) − L(θ−εz)) / 2ε of a language model whose losses stay
        within ln(vocab) of each other is at most ln(vocab) / ε; `seeds` of them."""
        return math.sqrt(self.seeds) * math.log(max(2, model.vocab_size)) / self.eps

    @property
    def perturbs_adapters(self) -> bool:
        """`params: lora`: the perturbed parameters are LoRA adapters injected into the frozen base."""
        return self.params == "lora"

    @property
    def transformers_model(self) -> bool:  # type: ignore[override]
        return self.perturbs_adapters  # peft wraps the model

    def check_model(self, model: Any) -> None:
        if self.perturbs_adapters:
            super().check_model(model)
