"""Pretraining (paper §III-C1): ϕ(θ) = θ, every parameter is trained and exchanged."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import ParadigmSettings


class PretrainSettings(ParadigmSettings):
    """Full-model training from a random (seeded) initialisation; the identity paradigm."""

    name: Literal["pretrain"] = Field("pretrain", description="Pretraining: every parameter is exchanged.")
    elementwise: ClassVar[bool] = True
