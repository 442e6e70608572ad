"""What the settings, the PS and the clients know of each codec without loading it: one `CodecSpec` each.

The codec itself is a `geofed.codec.base.Codec` subclass that names its spec (`Codec.spec`); the specs stay
here, free of numpy, because the settings (`geofed.config`) derive their list of codec names from them and
the operator reads the settings without the codec's dependencies. A spec declared anywhere else enters
`CODEC_SPECS` the same way, by being constructed (`geofed.plugins`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CODEC_SPECS: dict[str, CodecSpec] = {}
"""Every codec a federation can name (`codec.name`), in declaration order."""


@dataclass(frozen=True)
class CodecSpec:
    """One codec's facts.

    `name`: its `codec.name`. `delta_form`: the deltas it pushes, which selects the PS's fold ('dense':
    every element; 'sparse': chunk-wise top-k). `splittable`: ranks can encode slices of one stream
    (`geofed.codec.sharded.SliceCodec`). `lossless`: it carries the values exactly, as raw little-endian
    fp32 words a sharded PS front cuts by bytes, so the first model travels with it. `value_bits`: bits per
    element value on the wire, None when it does not send every element.
    """

    name: str
    delta_form: Literal["dense", "sparse"] = "dense"
    splittable: bool = False
    lossless: bool = False
    value_bits: int | None = None

    def __post_init__(self) -> None:
        if self.name in CODEC_SPECS:
            raise ValueError(f"codec {self.name!r} is declared twice")
        CODEC_SPECS[self.name] = self


def codec_spec(name: str) -> CodecSpec:
    """The spec `codec.name` names; ValueError, listing the known ones, for any other name."""
    try:
        return CODEC_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}; known: {', '.join(CODEC_SPECS)}") from None


FP32 = CodecSpec("fp32", splittable=True, lossless=True, value_bits=32)
BF16 = CodecSpec("bf16", splittable=True, value_bits=16)
INT8 = CodecSpec("int8", splittable=True, value_bits=8)
INT16 = CodecSpec("int16", splittable=True, value_bits=16)
SPARSE = CodecSpec("sparse", delta_form="sparse")
