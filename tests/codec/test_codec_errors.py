"""Every malformed header, payload or argument raises CodecError with a message naming the problem."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from geofed.codec import CodecError, decoder_for, make_codec
from geofed.codec.header import FRAME_PREFIX, StreamHeader, pack_frame, pack_header, parse_header

from .conftest import heavy_tailed

X = heavy_tailed(10_000, seed=2)


def encoded(*spec, frame_elems: int = 3000, x: np.ndarray = X) -> tuple[bytes, list[bytes]]:
    header, frames = make_codec(*spec).encode(x, frame_elems=frame_elems)
    return header, list(frames)


def decode_all(header: bytes, chunks: list[bytes], max_numel: int = 1 << 30) -> None:
    dec = decoder_for(header, max_numel=max_numel)
    for chunk in chunks:
        for _ in dec.feed(chunk):
            pass
    dec.finish()


def with_params(header: bytes, params: bytes) -> bytes:
    h = parse_header(header)
    return pack_header(StreamHeader(h.name, h.numel, h.frame_elems, params))


# --- headers -----------------------------------------------------------------------------------------


def test_every_truncation_of_a_header_is_reported() -> None:
    header, _ = encoded("int8", "huffman")
    for n in range(len(header)):
        with pytest.raises(CodecError, match="truncated header|Huffman code-length table|truncated codec"):
            decoder_for(header[:n], max_numel=X.size)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda h: b"XXXX" + h[4:], "bad header magic"),
        (lambda h: h[:4] + b"\x09" + h[5:], "unsupported header version 9"),
        (lambda h: h + b"\x00", "unexpected trailing bytes"),
    ],
)
def test_bad_header_envelope(mutate, message: str) -> None:
    header, _ = encoded("int8", "huffman")
    with pytest.raises(CodecError, match=message):
        decoder_for(mutate(header), max_numel=X.size)


@pytest.mark.parametrize(
    "name", ["int9+huffman", "int8+zip", "int8+huffman/b12", "fp64", "int8+huffman/bx", "int8+none/b0", "int8+ans/b064"]
)
def test_unknown_codec_in_header(name: str) -> None:
    header = pack_header(StreamHeader(name, 10, 10, b""))
    with pytest.raises(CodecError, match="unknown codec|unknown entropy|block_scales"):
        decoder_for(header, max_numel=10)


def test_numel_above_limit_is_a_bomb() -> None:
    header, _ = encoded("int8", "huffman")
    with pytest.raises(CodecError, match=f"announces {X.size} elements, more than the allowed {X.size - 1}"):
        decoder_for(header, max_numel=X.size - 1)


def test_frame_size_out_of_range() -> None:
    with pytest.raises(CodecError, match="frame_elems 0 outside"):
        decoder_for(pack_header(StreamHeader("fp32", 10, 0, b"")), max_numel=10)


@pytest.mark.parametrize("lo, hi", [(np.nan, 1.0), (0.0, np.inf), (-np.inf, 0.0), (2.0, 1.0)])
def test_bad_global_min_max(lo: float, hi: float) -> None:
    header, _ = encoded("int8", "none")
    bad = with_params(header, struct.pack("<ff", lo, hi))
    with pytest.raises(CodecError, match="non-finite min/max in header|min greater than max"):
        decoder_for(bad, max_numel=X.size)


def huffman_params(lengths: np.ndarray, max_len: int) -> bytes:
    z = zlib.compress(lengths.astype(np.uint8).tobytes())
    return struct.pack("<ffBI", -1.0, 1.0, 1, 512) + struct.pack("<BI", max_len, len(z)) + z


@pytest.mark.parametrize(
    "lengths, max_len, message",
    [
        ({0: 1, 1: 1, 2: 2}, 2, "Kraft sum"),
        ({0: 17, 1: 1}, 17, "exceeds the limit 16"),
        ({0: 1, 1: 1}, 5, "says max length 5"),
        ({}, 0, "no symbol has a code"),
    ],
)
def test_invalid_code_lengths_in_header(lengths: dict[int, int], max_len: int, message: str) -> None:
    table = np.zeros(256, np.uint8)
    for s, n in lengths.items():
        table[s] = n
    header = pack_header(StreamHeader("int8+huffman", 10, 10, huffman_params(table, max_len)))
    with pytest.raises(CodecError, match=message):
        decoder_for(header, max_numel=10)


def test_code_length_table_must_inflate_to_the_alphabet() -> None:
    header = pack_header(StreamHeader("int8+huffman", 10, 10, huffman_params(np.ones(300, np.uint8), 1)))
    with pytest.raises(CodecError, match="exactly 256 lengths"):
        decoder_for(header, max_numel=10)
    bomb = struct.pack("<ffBI", -1.0, 1.0, 1, 512) + struct.pack("<BI", 1, 4) + b"\x78\x9c\xff\xff"
    with pytest.raises(CodecError, match="Huffman code-length table"):
        decoder_for(pack_header(StreamHeader("int8+huffman", 10, 10, bomb)), max_numel=10)


def test_float_codecs_reject_parameters() -> None:
    with pytest.raises(CodecError, match="unexpected parameter bytes"):
        decoder_for(pack_header(StreamHeader("bf16", 10, 10, b"\x00")), max_numel=10)


# --- payloads ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [("int8", "huffman"), ("int16", "ans"), ("fp32",), ("int8", "none", 64)])
def test_truncated_payload_is_reported_by_finish(spec: tuple) -> None:
    header, frames = encoded(*spec)
    payload = b"".join(frames)
    with pytest.raises(CodecError, match=f"truncated payload: decoded 9000 of {X.size} elements"):
        decode_all(header, frames[:-1])
    with pytest.raises(CodecError, match="bytes of an incomplete frame buffered"):
        decode_all(header, [payload[:-1]])


def test_trailing_bytes_after_last_frame() -> None:
    header, frames = encoded("int8", "huffman")
    with pytest.raises(CodecError, match="1 bytes of data after the last frame"):
        decode_all(header, [b"".join(frames) + b"\x00"])
    with pytest.raises(CodecError, match="3 bytes of data after the last frame"):
        decode_all(header, frames + [b"abc"])


def test_frame_claiming_more_elements_than_remain_is_a_bomb() -> None:
    header, frames = encoded("int8", "huffman", x=X[:100], frame_elems=100)
    body = frames[0][FRAME_PREFIX.size :]
    with pytest.raises(CodecError, match="claims 1000000 elements but only 100 of 100 remain"):
        decode_all(header, [pack_frame(0, 1_000_000, body)])


def test_frame_claiming_a_huge_body_is_rejected_before_buffering() -> None:
    header, frames = encoded("int8", "huffman")
    prefix = FRAME_PREFIX.pack(b"GFfr", 1 << 31, 0, 3000)
    dec = decoder_for(header, max_numel=X.size)
    with pytest.raises(CodecError, match="claims a 2147483648-byte body"):
        list(dec.feed(prefix))
    with pytest.raises(CodecError, match="decoder already failed"):
        list(dec.feed(b"more"))


@pytest.mark.parametrize(
    "offset, count, message",
    [(3000, 3000, "starts at element 3000, expected 0"), (0, 2000, "holds 2000 elements, expected 3000")],
)
def test_frames_out_of_place(offset: int, count: int, message: str) -> None:
    header, frames = encoded("fp32")
    with pytest.raises(CodecError, match=message):
        decode_all(header, [pack_frame(offset, count, b"\x00" * 4 * count)])


@pytest.mark.parametrize("spec", [("fp32",), ("bf16",), ("int8", "none"), ("int8", "huffman"), ("int16", "ans")])
def test_frame_body_length_inconsistent(spec: tuple) -> None:
    header, frames = encoded(*spec)
    first = frames[0]
    _, body = first[: FRAME_PREFIX.size], first[FRAME_PREFIX.size :]
    short = pack_frame(0, 3000, body[:-1])
    with pytest.raises(CodecError, match="bytes|corrupt"):
        decode_all(header, [short] + frames[1:])


def test_bad_frame_magic() -> None:
    header, frames = encoded("int8", "huffman")
    with pytest.raises(CodecError, match="bad frame magic"):
        decode_all(header, [b"XXXX" + frames[0][4:]] + frames[1:])


def test_corrupt_huffman_frame_is_detected() -> None:
    header, frames = encoded("int8", "huffman", frame_elems=10_000)
    frame = bytearray(frames[0])
    lanes_end = FRAME_PREFIX.size + 5 + frame[FRAME_PREFIX.size + 4] * -(-10_000 // 64)
    frame[lanes_end + 10 : lanes_end + 18] = bytes(range(1, 255, 32))
    with pytest.raises(CodecError, match="corrupt Huffman data: lane 0 decoded to bit"):
        decode_all(header, [bytes(frame)])


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_block_scale_in_frame(value: float) -> None:
    header, frames = encoded("int8", "none", 1000)
    frame = bytearray(frames[0])
    frame[FRAME_PREFIX.size : FRAME_PREFIX.size + 4] = struct.pack("<f", value)
    with pytest.raises(CodecError, match="non-finite min/max in frame at element 0"):
        decode_all(header, [bytes(frame)] + frames[1:])


# --- arguments ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (("int4",), "unknown codec 'int4'"),
        (("int8", "lz4"), "unknown entropy stage 'lz4'"),
        (("int8", "huffman", 32), "block_scales must be 0"),
        (("int8", "huffman", -1), "block_scales must be 0"),
        (("int8", "huffman", 1.5), "block_scales must be 0"),
        (("auto",), "unknown codec 'auto'"),
    ],
)
def test_make_codec_rejects_bad_settings(args: tuple, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        make_codec(*args)


@pytest.mark.parametrize("spec", [("int8", "huffman"), ("int16", "none", 128)])
def test_non_finite_input_cannot_be_quantised(spec: tuple) -> None:
    x = X.copy()
    x[1234] = np.nan
    with pytest.raises(CodecError, match="non-finite"):
        make_codec(*spec).encode(x)


@pytest.mark.parametrize(
    "flat, kwargs, message",
    [
        (X.astype(np.float64), {}, "1-D float32"),
        (X.reshape(100, 100), {}, "1-D float32"),
        (X[::2], {}, "C-contiguous"),
        ([1.0, 2.0], {}, "numpy array"),
        (X, {"frame_elems": 0}, "frame_elems must be"),
        (X, {"frame_elems": 1 << 27}, "frame_elems must be"),
        (X, {"residual_out": np.zeros(5, np.float32)}, "residual_out must be a float32 array"),
        (X, {"residual_out": X}, "must not overlap flat"),
    ],
)
def test_encode_rejects_bad_arguments(flat, kwargs: dict, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        make_codec("int8").encode(flat, **kwargs)


def test_codec_error_is_a_value_error() -> None:
    assert issubclass(CodecError, ValueError)
