"""RAVAN: each wrapped layer computes W x + (α/r)·Σᵢ Bᵢ Hᵢ Aᵢ x; only the r × r heads Hᵢ train and travel.

Aᵢ (r × in, scaled 1/√in) and Bᵢ (out × r, scaled 1/√r) are buffers drawn from a torch generator seeded
with `paradigm.seed`, in the model's layer order, so every client builds the same ones and nothing about
them crosses the WAN; they are not parameters, so they are neither trained nor in the manifest. Hᵢ starts
at zero (the model starts as the base). `export` folds Σᵢ Bᵢ Hᵢ Aᵢ into the base weights.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from geofed.paradigms.ravan import RavanSettings

from .adapters import is_conv1d, layer_dims, target_layers
from .base import ClientParadigm


class RavanLinear(nn.Module):
    """A frozen linear layer plus `heads` seeded projections around trainable r × r heads."""

    def __init__(self, base: nn.Module, heads: int, rank: int, alpha: float, dropout: float,
                 generator: torch.Generator) -> None:
        super().__init__()
        n_in, n_out = layer_dims(base)
        self.base = base
        self.scale = alpha / rank
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("ravan_A", torch.randn(heads, rank, n_in, generator=generator) / math.sqrt(n_in))
        self.register_buffer("ravan_B", torch.randn(heads, n_out, rank, generator=generator) / math.sqrt(rank))
        self.ravan_H = nn.Parameter(torch.zeros(heads, rank, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.einsum("...i,hri->...hr", self.dropout(x), self.ravan_A)  # (..., heads, r)
        h = torch.einsum("...hr,hsr->...hs", h, self.ravan_H)
        return self.base(x) + self.scale * torch.einsum("...hs,hos->...o", h, self.ravan_B)

    @torch.no_grad()
    def update(self) -> torch.Tensor:
        """(α/r)·Σᵢ Bᵢ Hᵢ Aᵢ as an (out × in) matrix."""
        return self.scale * torch.einsum("hos,hsr,hri->oi", self.ravan_B, self.ravan_H, self.ravan_A)

    @torch.no_grad()
    def merged(self) -> nn.Module:
        weight = self.base.weight
        weight += self.update().T if is_conv1d(self.base) else self.update()
        return self.base


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


class Ravan(ClientParadigm):
    name = "ravan"
    shell_ok = False

    def __init__(self, settings: RavanSettings) -> None:
        super().__init__(settings)

    def prepare(self, model: nn.Module) -> nn.Module:
        s = self.settings
        layers = target_layers(model, list(s.target_modules), s.rank)
        generator = torch.Generator().manual_seed(s.seed)
        for name, layer in layers.items():  # named_modules order: the same draws on every client
            _replace(model, name, RavanLinear(layer, s.heads, s.rank, s.alpha, s.dropout, generator))
        return super().prepare(model)

    def exchanged(self, name: str, param: nn.Parameter) -> bool:
        return name.endswith("ravan_H")

    def export(self, model: nn.Module) -> nn.Module:
        for name, module in list(model.named_modules()):
            if isinstance(module, RavanLinear):
                _replace(model, name, module.merged())
        return model
