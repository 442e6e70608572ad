"""Model <-> one flat fp32 vector, the layout the PS keeps the global model in (paper §III-B3).

The paper flattens every tensor into one 1-D tensor before quantising, so one min/max pair and one
Huffman table cover the whole delta. The layout is the manifest: (name, shape, dtype) in
`named_parameters()` order, tied duplicates skipped. `select` is the seam for fine-tuning paradigms
(Algorithm 1's ϕ(θ)): pretraining exchanges every parameter, LoRA variants would pass a predicate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

Select = Callable[[str, nn.Parameter], bool]
ManifestEntry = tuple[str, tuple[int, ...], str]


class ManifestMismatch(ValueError):
    """The local model's exchanged parameters do not match the layout the PS announced."""


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.float32` -> "float32", the spelling used in manifests."""
    return str(dtype).removeprefix("torch.")


def requires_grad(name: str, param: nn.Parameter) -> bool:
    """A `select` predicate exchanging only trainable parameters (for frozen-base paradigms)."""
    return param.requires_grad


def selected(model: nn.Module, select: Select | None = None) -> Iterator[tuple[str, nn.Parameter]]:
    """The exchanged parameters in manifest order; tied duplicates appear once (first name wins)."""
    for name, param in model.named_parameters():
        if select is None or select(name, param):
            yield name, param


def manifest(model: nn.Module, select: Select | None = None) -> list[ManifestEntry]:
    """(name, shape, dtype) of every exchanged parameter, in flat-vector order."""
    return [(name, tuple(p.shape), dtype_name(p.dtype)) for name, p in selected(model, select)]


def flat_numel(model: nn.Module, select: Select | None = None) -> int:
    """Length of the flat vector for `model`."""
    return sum(p.numel() for _, p in selected(model, select))


def check_manifest(model: nn.Module, expected: list[ManifestEntry], select: Select | None = None) -> None:
    """Raise `ManifestMismatch` naming the first entry where `model` differs from `expected`."""
    local = manifest(model, select)
    for i, (mine, theirs) in enumerate(zip(local, expected, strict=False)):
        theirs = (theirs[0], tuple(theirs[1]), theirs[2])
        if mine != theirs:
            raise ManifestMismatch(f"parameter #{i}: local {mine} != expected {theirs}")
    if len(local) != len(expected):
        raise ManifestMismatch(f"local model has {len(local)} exchanged parameters, expected {len(expected)}")


def _check_flat(flat: torch.Tensor, numel: int, what: str) -> None:
    if flat.dim() != 1 or flat.numel() != numel:
        raise ValueError(f"{what} must be a 1-D tensor of {numel} elements, got shape {tuple(flat.shape)}")


@torch.no_grad()
def flatten(model: nn.Module, select: Select | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """The exchanged parameters as one fp32 CPU vector (written into `out` when given)."""
    numel = flat_numel(model, select)
    if out is None:
        out = torch.empty(numel, dtype=torch.float32)
    _check_flat(out, numel, "out")
    offset = 0
    for _, param in selected(model, select):
        n = param.numel()
        out[offset : offset + n].copy_(param.detach().reshape(-1))
        offset += n
    return out


@torch.no_grad()
def load_flat_(model: nn.Module, flat: torch.Tensor, select: Select | None = None) -> nn.Module:
    """Copy `flat` into the exchanged parameters in place, casting to each parameter's dtype and device."""
    _check_flat(flat, flat_numel(model, select), "flat")
    offset = 0
    for _, param in selected(model, select):
        n = param.numel()
        param.copy_(flat[offset : offset + n].view(param.shape))
        offset += n
    return model


@torch.no_grad()
def delta_(
    flat_out: torch.Tensor, model: nn.Module, base_flat: torch.Tensor, select: Select | None = None
) -> torch.Tensor:
    """δ = θ_local − θ_base into the preallocated fp32 `flat_out` (Algorithm 1: δc = ϕc − ϕ)."""
    numel = flat_numel(model, select)
    _check_flat(flat_out, numel, "flat_out")
    _check_flat(base_flat, numel, "base_flat")
    if flat_out.dtype != torch.float32:
        raise ValueError(f"flat_out must be float32, got {flat_out.dtype}")
    flatten(model, select, out=flat_out)
    return flat_out.sub_(base_flat)
