"""Delta codec shared by the PS and the clients (paper §III-B3): flatten, min-max quantise, entropy-code.

codec = make_codec("int8", entropy="huffman", block_scales=0)
header, frames = codec.encode(flat)                  # header now, frames lazily
dec = decoder_for(header, max_numel=limit)
for offset, values in dec.feed(chunk): ...           # chunks may split frames anywhere
dec.finish()
"""

from geofed.codec.base import Codec
from geofed.codec.error_feedback import ErrorFeedback
from geofed.codec.errors import CodecError
from geofed.codec.policy import choose_codec
from geofed.codec.registry import decoder_for, make_codec
from geofed.codec.stream import StreamDecoder

__all__ = [
    "Codec",
    "CodecError",
    "ErrorFeedback",
    "StreamDecoder",
    "choose_codec",
    "decoder_for",
    "make_codec",
]
