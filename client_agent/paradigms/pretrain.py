"""Pretraining (paper §III-C1): the identity reparametrisation; every parameter is trained and exchanged."""

from __future__ import annotations

from .base import ClientParadigm


class Pretrain(ClientParadigm):
    """All of ClientParadigm's defaults: ϕ = θ."""

    name = "pretrain"
