"""The manifest: the layout of the exchanged flat vector, one type shared by PS, client and wire.

(name, shape, dtype) per tensor in flat-vector order; the PS holds every tensor as fp32 whatever `dtype`
says. The client derives it from its model (`client_agent.training.flat.manifest`), the master's Θ0 upload
installs it at the PS, `geofed.protocol.messages` converts it to and from `TensorSpec`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the manifest."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


Manifest = tuple[TensorEntry, ...]


def as_manifest(entries: Iterable[TensorEntry | tuple]) -> Manifest:
    """Entries or (name, shape, dtype) triples as a Manifest."""
    return tuple(e if isinstance(e, TensorEntry) else TensorEntry(*e) for e in entries)


def manifest_numel(manifest: Sequence[TensorEntry]) -> int:
    """Total elements a manifest describes."""
    return sum(t.numel for t in manifest)


def validate_manifest(manifest: Sequence[TensorEntry], *, max_numel: int) -> int:
    """Check names are unique and shapes sane; return the element count."""
    if not manifest:
        raise ValueError("manifest is empty")
    names = [t.name for t in manifest]
    if len(set(names)) != len(names):
        raise ValueError("manifest has duplicate tensor names")
    for t in manifest:
        if any(d < 0 for d in t.shape):
            raise ValueError(f"tensor {t.name!r} has a negative dimension")
    total = manifest_numel(manifest)
    if total <= 0 or total > max_numel:
        raise ValueError(f"manifest describes {total} elements (allowed 1..{max_numel})")
    return total


def manifest_difference(local: Sequence[TensorEntry], expected: Sequence[TensorEntry]) -> str | None:
    """None when the layouts agree (dtype aside: the wire is fp32), else the first difference in words."""
    for i, (mine, theirs) in enumerate(zip(local, expected, strict=False)):
        if (mine.name, mine.shape) != (theirs.name, theirs.shape):
            return (f"tensor #{i} is {mine.name} {list(mine.shape)} here but {theirs.name} {list(theirs.shape)} "
                    "in the federation")
    if len(local) != len(expected):
        return f"{len(local)} exchanged tensors here, {len(expected)} in the federation"
    return None
