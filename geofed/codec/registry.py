"""Codec names <-> codec objects, and the decoder factory that reads a header.

Wire names: "fp32", "bf16", "int8+huffman", "int16+ans", "int8+none", "int8+huffman/b65536" (per-block
ranges of 65536 elements), "sparse/c4096k64v2+rice" (top-64 of every 4096 values, 2-bit, Rice indices).
The header carries the name, so the receiver needs no out-of-band agreement.
"""

from __future__ import annotations

from geofed.codec import floats, quantized  # noqa: F401  (defining a codec class registers it; sparse below)
from geofed.codec.base import CODECS, Codec
from geofed.codec.errors import CodecError
from geofed.codec.header import parse_header
from geofed.codec.sparse_params import SparseParams
from geofed.codec.stream import StreamDecoder


def codec_class(name: str) -> type[Codec]:
    """The codec class `codec.name` selects."""
    try:
        return CODECS[name]
    except KeyError:
        raise CodecError(f"unknown codec {name!r}; known: {', '.join(CODECS)}") from None


def make_codec(name: str, entropy: str = "huffman", block_scales: int = 0, *,
               sparse: SparseParams | None = None) -> Codec:
    """The codec for a `geofed.config.CodecConfig` triple; entropy and blocks are ignored for fp32/bf16/sparse.

    "sparse" takes its chunk, k, value bits and index coding from `sparse` (`CodecConfig.sparse_params()`).
    """
    return codec_class(name).build(entropy, block_scales, sparse)


def codec_from_wire_name(wire: str) -> Codec:
    """Inverse of `Codec.name`; CodecError for anything this version does not know."""
    for cls in CODECS.values():
        codec = cls.from_wire(wire)
        if codec is not None and codec.name == wire:  # only canonical spellings: one name, one byte format
            return codec
    raise CodecError(f"unknown codec {wire!r} in header")


def decoder_for(header: bytes, *, max_numel: int) -> StreamDecoder:
    """Parse and validate `header`; `max_numel` is the receiver's bound (decompression-bomb guard)."""
    h = parse_header(header)
    if h.numel > max_numel:
        raise CodecError(f"header announces {h.numel} elements, more than the allowed {max_numel}")
    codec = codec_from_wire_name(h.name)
    return StreamDecoder(codec.name, h.numel, h.frame_elems, codec.frame_decoder(h.params),
                         lossless=codec.spec.lossless)
