"""The sparse codec's parameters (chunk, kept entries, value bits, index coding) and its wire name, apart from the
codec itself so that the codec interface can name them without importing the codec."""

from __future__ import annotations

import re
from dataclasses import dataclass

from geofed.codec.errors import CodecError

VALUE_BITS = (2, 4, 8)
INDEX_CODINGS = ("rice", "fixed")
MIN_CHUNK, MAX_CHUNK = 16, 1 << 16
_WIRE = re.compile(r"^sparse/c([0-9]{1,6})k([0-9]{1,6})v([0-9])\+([a-z]+)$")


@dataclass(frozen=True)
class SparseParams:
    """Everything the sparse wire format depends on; `name` spells it canonically."""

    chunk: int
    k: int
    bits: int
    index: str

    def __post_init__(self) -> None:
        if not MIN_CHUNK <= self.chunk <= MAX_CHUNK:
            raise CodecError(f"sparse chunk must be in [{MIN_CHUNK}, {MAX_CHUNK}], got {self.chunk}")
        if not 1 <= self.k <= self.chunk:
            raise CodecError(f"sparse k must be in [1, chunk={self.chunk}], got {self.k}")
        if self.bits not in VALUE_BITS:
            raise CodecError(f"sparse value bits must be one of {VALUE_BITS}, got {self.bits}")
        if self.index not in INDEX_CODINGS:
            raise CodecError(f"sparse index coding must be one of {INDEX_CODINGS}, got {self.index!r}")

    @property
    def name(self) -> str:
        return f"sparse/c{self.chunk}k{self.k}v{self.bits}+{self.index}"

    @property
    def density(self) -> float:
        return self.k / self.chunk


def parse_sparse_name(wire: str) -> SparseParams | None:
    """The parameters of a sparse wire name; None if `wire` is not one (CodecError if it is a bad one)."""
    m = _WIRE.match(wire)
    if not m:
        return None
    p = SparseParams(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4))
    if p.name != wire:  # only canonical spellings (no leading zeros): one name, one byte format
        raise CodecError(f"unknown codec {wire!r} in header")
    return p
