"""Model <-> one flat fp32 vector, the layout the PS keeps the global model in (paper §III-B3).

The paper flattens every tensor into one 1-D tensor before quantising, so one min/max pair and one
Huffman table cover the whole delta. The layout is the manifest: (name, shape, dtype) in
`named_parameters()` order, tied duplicates skipped. `select` is the seam for fine-tuning paradigms
(Algorithm 1's ϕ(θ)): pretraining exchanges every parameter, LoRA variants would pass a predicate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

from geofed.manifest import Manifest, TensorEntry, as_manifest, manifest_difference

Select = Callable[[str, nn.Parameter], bool]


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


def manifest(model: nn.Module, select: Select | None = None) -> Manifest:
    """(name, shape, dtype) of every exchanged parameter, in flat-vector order."""
    return tuple(TensorEntry(name, tuple(p.shape), dtype_name(p.dtype)) for name, p in selected(model, select))


def flat_numel(model: nn.Module, select: Select | None = None) -> int:
    """Length of the flat vector for `model`."""
    return sum(p.numel() for _, p in selected(model, select))


def check_manifest(model: nn.Module, expected: Sequence[TensorEntry | tuple], select: Select | None = None) -> None:
    """Raise `ManifestMismatch` naming the first entry where `model` differs from `expected`."""
    difference = manifest_difference(manifest(model, select), as_manifest(expected))
    if difference is not None:
        raise ManifestMismatch(f"the local model does not match the federation's: {difference}")


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
