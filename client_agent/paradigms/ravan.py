"""RAVAN: each wrapped layer computes W x + (α/r)·Σᵢ sᵢ Bᵢ Hᵢ Aᵢ x; the heads Hᵢ and scalings sᵢ train.

Aᵢ (r × in, orthonormal rows) and Bᵢ (out × r, orthonormal columns), the heads orthogonal to each other as
the RAVAN paper's Gram-Schmidt initialisation, are buffers drawn from `paradigm.seed` (`ravan_projections`)
in the model's layer order, so every client builds the same ones (the frozen digest declared at Join refuses
one that drew them differently) and nothing about them crosses the WAN; they are not parameters, so they are
neither trained nor in the manifest. Hᵢ starts at zero (the model starts as the base). Each head's scaling sᵢ
starts every round at 1 and trains with the heads; after its local steps the client folds it into its
head (Hᵢ ← sᵢHᵢ, sᵢ ← 1, the same function), so what it uploads is sᵢHᵢ, as in the RAVAN paper, and the
exchanged vector stays the r × r heads. `export` folds Σᵢ sᵢ Bᵢ Hᵢ Aᵢ into the base weights.
"""

from __future__ import annotations

import torch
from torch import nn

from geofed.paradigms.ravan import RavanSettings

from ..training.trainer import LocalTrainer, TrainStats
from .adapters import is_conv1d, layer_dims, target_layers, target_names
from .base import ClientParadigm
from .ravan_projections import projections


class RavanLinear(nn.Module):
    """A frozen linear layer plus `heads` seeded projections around trainable r × r heads and their scalings."""

    def __init__(
        self, base: nn.Module, heads: int, rank: int, alpha: float, dropout: float, *, seed: int, layer: int
    ) -> None:
        super().__init__()
        n_in, n_out = layer_dims(base)
        self.base = base
        self.scale = alpha / rank
        self.dropout = nn.Dropout(dropout)
        a, b = projections(seed, layer, heads, rank, n_in, n_out)
        self.register_buffer("ravan_A", torch.from_numpy(a))
        self.register_buffer("ravan_B", torch.from_numpy(b))
        self.ravan_H = nn.Parameter(torch.zeros(heads, rank, rank))
        self.ravan_s = nn.Parameter(torch.ones(heads))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.einsum("...i,hri->...hr", self.dropout(x), self.ravan_A)  # (..., heads, r)
        h = torch.einsum("...hr,hsr->...hs", h, self.ravan_H) * self.ravan_s[:, None]
        return self.base(x) + self.scale * torch.einsum("...hs,hos->...o", h, self.ravan_B)

    @torch.no_grad()
    def update(self) -> torch.Tensor:
        """(α/r)·Σᵢ sᵢ Bᵢ Hᵢ Aᵢ as an (out × in) matrix."""
        heads = self.ravan_H * self.ravan_s[:, None, None]
        return self.scale * torch.einsum("hos,hsr,hri->oi", self.ravan_B, heads, self.ravan_A)

    @torch.no_grad()
    def fold_scalings(self) -> None:
        """Hᵢ ← sᵢHᵢ and sᵢ ← 1: the layer computes the same, and the heads hold what the client uploads."""
        self.ravan_H.mul_(self.ravan_s[:, None, None].to(self.ravan_H.dtype))
        self.ravan_s.fill_(1.0)

    @torch.no_grad()
    def merged(self) -> nn.Module:
        weight = self.base.weight
        weight += self.update().T if is_conv1d(self.base) else self.update()
        return self.base


def fold_scalings(model: nn.Module) -> None:
    """Fold every RAVAN layer's scalings into its heads (`RavanLinear.fold_scalings`)."""
    for module in model.modules():
        if isinstance(module, RavanLinear):
            module.fold_scalings()


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


class Ravan(ClientParadigm):
    shell_ok = False

    def __init__(self, settings: RavanSettings) -> None:
        super().__init__(settings)

    def prepare(self, model: nn.Module) -> nn.Module:
        s = self.settings
        layers = target_layers(model, target_names(s, model), s.rank)
        for index, (name, layer) in enumerate(layers.items()):  # named_modules order: the same on every client
            wrapped = RavanLinear(layer, s.heads, s.rank, s.alpha, s.dropout, seed=s.seed, layer=index)
            _replace(model, name, wrapped)
        return super().prepare(model)

    def exchanged(self, name: str, param: nn.Parameter) -> bool:
        return name.endswith("ravan_H")

    def trainable(self, name: str, param: nn.Parameter) -> bool:
        return name.endswith(("ravan_H", "ravan_s"))

    def frozen_buffers(self, name: str) -> bool:
        return name.endswith(("ravan_A", "ravan_B"))

    def local_update(self, trainer: LocalTrainer, steps: int, deadline: float | None, version: int) -> TrainStats:
        """The local steps on heads and scalings, then every sᵢ folded into its head (uploaded as sᵢHᵢ)."""
        stats = super().local_update(trainer, steps, deadline, version)
        fold_scalings(trainer.model)
        return stats

    def export(self, model: nn.Module) -> nn.Module:
        for name, module in list(model.named_modules()):
            if isinstance(module, RavanLinear):
                _replace(model, name, module.merged())
        return model
