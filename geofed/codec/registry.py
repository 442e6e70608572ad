"""Codec names <-> codec objects, and the decoder factory that reads a header.

Wire names: "fp32", "bf16", "int8+huffman", "int16+ans", "int8+none", "int8+huffman/b65536" (per-block
ranges of 65536 elements), "sparse/c4096k64v2+rice" (top-64 of every 4096 values, 2-bit, Rice indices).
The header carries the name, so the receiver needs no out-of-band agreement.
"""

from __future__ import annotations

import re

from geofed.codec.base import Codec
from geofed.codec.entropy import ENTROPY_KINDS
from geofed.codec.errors import CodecError
from geofed.codec.floats import Bf16Codec, Fp32Codec
from geofed.codec.header import parse_header
from geofed.codec.quantize import BITS, MIN_BLOCK
from geofed.codec.quantized import QuantizedCodec
from geofed.codec.sparse import SparseCodec, SparseParams, parse_sparse_name
from geofed.codec.stream import StreamDecoder

CODEC_NAMES = ("fp32", "bf16", "int8", "int16", "sparse")
MAX_BLOCK = 1 << 26
_WIRE = re.compile(r"^(int8|int16)\+([a-z]+)(?:/b([0-9]{1,9}))?$")


def make_codec(name: str, entropy: str = "huffman", block_scales: int = 0, *,
               sparse: SparseParams | None = None) -> Codec:
    """The codec for a `geofed.config.CodecConfig` triple; entropy and blocks are ignored for fp32/bf16/sparse.

    "sparse" takes its chunk, k, value bits and index coding from `sparse` (`CodecConfig.sparse_params()`).
    """
    if name == "sparse":
        if sparse is None:
            raise CodecError("the sparse codec needs its parameters (chunk, k, value bits, index coding)")
        return SparseCodec(sparse)
    if name == "fp32":
        return Fp32Codec()
    if name == "bf16":
        return Bf16Codec()
    if name not in BITS:
        raise CodecError(f"unknown codec {name!r}; known: {', '.join(CODEC_NAMES)}")
    if entropy not in ENTROPY_KINDS:
        raise CodecError(f"unknown entropy stage {entropy!r}; known: {', '.join(ENTROPY_KINDS)}")
    if (
        isinstance(block_scales, bool)
        or not isinstance(block_scales, int)
        or (block_scales and not MIN_BLOCK <= block_scales <= MAX_BLOCK)
    ):
        raise CodecError(
            f"block_scales must be 0 (global) or an int in [{MIN_BLOCK}, {MAX_BLOCK}], got {block_scales!r}"
        )
    return QuantizedCodec(BITS[name], entropy, block_scales)


def codec_from_wire_name(wire: str) -> Codec:
    """Inverse of `Codec.name`; CodecError for anything this version does not know."""
    if wire in ("fp32", "bf16"):
        return make_codec(wire)
    sparse = parse_sparse_name(wire)
    if sparse is not None:
        return SparseCodec(sparse)
    m = _WIRE.match(wire)
    codec = make_codec(m.group(1), m.group(2), int(m.group(3) or 0)) if m else None
    if codec is None or codec.name != wire:  # only canonical spellings: one name, one byte format
        raise CodecError(f"unknown codec {wire!r} in header")
    return codec


def decoder_for(header: bytes, *, max_numel: int) -> StreamDecoder:
    """Parse and validate `header`; `max_numel` is the receiver's bound (decompression-bomb guard)."""
    h = parse_header(header)
    if h.numel > max_numel:
        raise CodecError(f"header announces {h.numel} elements, more than the allowed {max_numel}")
    codec = codec_from_wire_name(h.name)
    return StreamDecoder(codec.name, h.numel, h.frame_elems, codec.frame_decoder(h.params))
