"""Pretraining (paper §III-C1): ϕ(θ) = θ, every parameter is trained and exchanged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from .base import ParadigmSettings


class PretrainSettings(ParadigmSettings):
    """Full-model training from a random (seeded) initialisation; the identity paradigm."""

    name: Literal["pretrain"] = Field("pretrain", description="Pretraining: every parameter is exchanged.")
    client_half: ClassVar[str] = "client_agent.paradigms.pretrain:Pretrain"
    strategies: ClassVar[Mapping[str, str]] = {
        "dense": "ps_server.aggregation.strategies.pretrain:Pretrain",
        # The sparse mode (`codec.name=sparse`): chunk-wise top-k deltas folded by their nonzeros.
        "sparse": "ps_server.aggregation.strategies.sparse_pretrain:SparsePretrain",
    }
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {"pretrain": {"training": {"lr": 5e-4}}}
    elementwise: ClassVar[bool] = True
