"""Hostile PushDelta streams for the fuzzer: each strategy draws one malformed request and the status it
must earn. Every case is invalid by construction (a mutation that could happen to stay valid is checked
with the codec first and discarded), so an OK answer is itself a failure.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import grpc
import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from geofed.codec import CodecError, decoder_for
from geofed.codec.header import StreamHeader, pack_frame, pack_header
from geofed.protocol import geofed_pb2 as pb
from geofed_testing.wire import delta_messages, encoded

NUMEL = 3000
CAP = 64_000  # --max-upload-bytes of the fuzzed PS: the 12 kB fp32 model fits
FAR_AHEAD = 1 << 40  # a base version no PS in a test will reach
SPECIFIC = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.DATA_LOSS, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.OUT_OF_RANGE,
}
INVALID = grpc.StatusCode.INVALID_ARGUMENT
LOSS = grpc.StatusCode.DATA_LOSS
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


@dataclass
class Case:
    """One hostile push: its messages and the status codes that count as the right refusal."""

    name: str
    messages: list[pb.DeltaChunk]
    expect: frozenset[grpc.StatusCode]

    def __repr__(self) -> str:  # hypothesis prints failing cases: keep them readable
        parts = [m.WhichOneof("part") or "empty" for m in self.messages]
        head = next((m.header for m in self.messages if m.WhichOneof("part") == "header"), None)
        fields = f"base={head.base_version} declared={head.payload_bytes} codec={bytes(head.codec_header[:24])!r}" \
            if head is not None else "no header"
        return f"Case({self.name}: {len(parts)} messages {parts[:4]}..., {fields})"


def valid_push(header: bytes, payload: bytes) -> bool:
    """The codec's own verdict: would this header + payload decode to a finite delta of the model's size?"""
    try:
        dec = decoder_for(header, max_numel=NUMEL)
        if dec.numel != NUMEL:
            return False
        for _, values in dec.feed(payload):
            if not np.isfinite(values).all():
                return False
        dec.finish()
    except CodecError:
        return False
    return True


def _base(draw) -> tuple[bytes, bytes]:
    seed = draw(st.integers(0, 2**32 - 1))
    values = (np.random.default_rng(seed).standard_normal(NUMEL) * 0.01).astype(np.float32)
    return encoded(values, draw(st.sampled_from(["fp32", "int8"])))


@st.composite
def protocol_order(draw) -> Case:
    """Header missing, repeated, or a part of the oneof left empty."""
    header, payload = _base(draw)
    msgs = delta_messages(header, payload)
    kind = draw(st.sampled_from(["payload_first", "trailer_first", "two_headers", "empty_part"]))
    if kind == "payload_first":
        msgs = msgs[1:]
    elif kind == "trailer_first":
        msgs = [msgs[-1], *msgs]
    elif kind == "two_headers":
        msgs.insert(draw(st.integers(1, len(msgs) - 1)), msgs[0])
    else:
        msgs.insert(draw(st.integers(1, len(msgs) - 1)), pb.DeltaChunk())
    return Case(f"order:{kind}", msgs, frozenset({INVALID}))


@st.composite
def truncated(draw) -> Case:
    """The stream stops early, or the trailer comes before the declared bytes."""
    header, payload = _base(draw)
    if draw(st.booleans()):  # no trailer at all
        msgs = delta_messages(header, payload, chunk=1024)
        return Case("truncated:no_trailer", msgs[: draw(st.integers(1, len(msgs) - 1))], frozenset({INVALID}))
    cut = draw(st.integers(0, len(payload) - 1))
    msgs = delta_messages(header, payload[:cut], declared=len(payload))
    return Case("truncated:early_trailer", msgs, frozenset({INVALID}))


@st.composite
def wrong_checksum(draw) -> Case:
    """A trailer digest that is not the payload's (any length)."""
    header, payload = _base(draw)
    sha = draw(st.binary(min_size=0, max_size=64))
    assume(sha != hashlib.sha256(payload).digest())
    return Case("checksum:wrong_digest", delta_messages(header, payload, sha=sha), frozenset({LOSS}))


@st.composite
def flipped_payload(draw) -> Case:
    """One payload byte changed in flight; the trailer still carries the sender's digest."""
    header, payload = _base(draw)
    digest = hashlib.sha256(payload).digest()
    i = draw(st.integers(0, len(payload) - 1))
    payload = payload[:i] + bytes([payload[i] ^ draw(st.integers(1, 255))]) + payload[i + 1 :]
    # The flip may also break framing first (INVALID_ARGUMENT, decoded while it streams in).
    return Case("checksum:flipped_payload", delta_messages(header, payload, sha=digest), frozenset({LOSS, INVALID}))


@st.composite
def bad_offsets(draw) -> Case:
    """Chunks reordered, or one chunk claiming the wrong offset."""
    header, payload = _base(draw)
    msgs = delta_messages(header, payload, chunk=draw(st.integers(256, 2048)))
    body = msgs[1:-1]
    assume(len(body) >= 2)
    if draw(st.booleans()):
        perm = draw(st.permutations(range(len(body))))
        assume(list(perm) != sorted(perm))
        return Case("order:reordered_chunks", [msgs[0], *[body[i] for i in perm], msgs[-1]], frozenset({INVALID}))
    i = draw(st.integers(0, len(body) - 1))
    wrong = draw(st.integers(0, 2**64 - 1))
    assume(wrong != body[i].payload.offset)
    body[i] = pb.DeltaChunk(payload=pb.DeltaPayload(offset=wrong, data=body[i].payload.data))
    return Case("order:wrong_offset", [msgs[0], *body, msgs[-1]], frozenset({INVALID}))


@st.composite
def size_lies(draw) -> Case:
    """Declared size above the cap, below what is sent, or above what is sent."""
    header, payload = _base(draw)
    kind = draw(st.sampled_from(["over_cap", "more_than_declared", "less_than_declared"]))
    if kind == "over_cap":
        return Case("size:over_cap", delta_messages(header, payload, declared=draw(st.integers(CAP + 1, 2**64 - 1))),
                    frozenset({EXHAUSTED}))
    if kind == "more_than_declared":
        return Case("size:more_than_declared",
                    delta_messages(header, payload, declared=len(payload) - draw(st.integers(1, len(payload)))),
                    frozenset({INVALID}))
    return Case("size:less_than_declared",
                delta_messages(header, payload, declared=len(payload) + draw(st.integers(1, CAP - len(payload)))),
                frozenset({INVALID}))


@st.composite
def nonfinite(draw) -> Case:
    """NaN/Inf values in an fp32 or bf16 delta (int8 cannot carry them: its encoder refuses)."""
    values = np.zeros(NUMEL, np.float32)
    idx = draw(st.lists(st.integers(0, NUMEL - 1), min_size=1, max_size=5))
    values[idx] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    codec = draw(st.sampled_from(["fp32", "bf16"]))
    return Case("nonfinite", delta_messages(*encoded(values, codec)), frozenset({INVALID}))


def bomb_header(numel: int, frame_elems: int) -> bytes:
    """int8+Huffman with a one-symbol alphabet: every frame body is 0 bytes, whatever it claims to hold."""
    params = struct.pack("<ff", -1.0, 1.0) + struct.pack("<BI", 0, 7)
    return pack_header(StreamHeader("int8+huffman", numel, frame_elems, params))


@st.composite
def decompression_bomb(draw) -> Case:
    """A few bytes that claim billions of symbols, or frames that claim more than the model holds."""
    if draw(st.booleans()):
        numel = draw(st.integers(2**31, 2**62))
        header = bomb_header(numel, 1 << 26)
        payload = b"".join(pack_frame(i << 26, 1 << 26, b"") for i in range(draw(st.integers(0, 4))))
        return Case("bomb:header_claims_billions", delta_messages(header, payload), frozenset({INVALID, EXHAUSTED}))
    header = bomb_header(NUMEL, 1 << 20)
    count = draw(st.integers(NUMEL + 1, 2**32 - 1))
    return Case("bomb:frame_claims_too_many", delta_messages(header, pack_frame(0, count, b"")), frozenset({INVALID}))


@st.composite
def bad_codec_header(draw) -> Case:
    """Random header bytes, or a valid header with bytes flipped in its fixed fields."""
    header, payload = _base(draw)
    if draw(st.booleans()):
        header = draw(st.binary(max_size=200))
    else:
        fixed = min(len(header), 4 + 2 + header[5] + 16)
        flips = draw(st.lists(st.tuples(st.integers(0, fixed - 1), st.integers(1, 255)), min_size=1, max_size=3))
        b = bytearray(header)
        for i, x in flips:
            b[i] ^= x
        header = bytes(b)
    assume(not valid_push(header, payload))
    return Case("codec:bad_header", delta_messages(header, payload), frozenset({INVALID}))


@st.composite
def garbage_payload(draw) -> Case:
    """A valid header followed by random bytes (with a matching digest and size)."""
    header, _ = _base(draw)
    payload = draw(st.binary(min_size=1, max_size=20_000))
    assume(not valid_push(header, payload))
    return Case("codec:garbage_payload", delta_messages(header, payload), frozenset({INVALID}))


@st.composite
def bad_fields(draw) -> Case:
    """Base version from the future, an empty or huge upload id, or an init from a non-master."""
    header, payload = _base(draw)
    kind = draw(st.sampled_from(["base_ahead", "upload_id", "init"]))
    if kind == "base_ahead":
        # INVALID_ARGUMENT, or FAILED_PRECONDITION where the PS reads it as "I restarted behind you: resync".
        return Case("field:base_ahead", delta_messages(header, payload, base=draw(st.integers(FAR_AHEAD, 2**64 - 1))),
                    frozenset({INVALID, grpc.StatusCode.FAILED_PRECONDITION}))
    if kind == "upload_id":
        uid = draw(st.sampled_from(["", "x" * draw(st.integers(129, 4096))]))
        return Case("field:upload_id", delta_messages(header, payload, upload_id=uid), frozenset({INVALID}))
    fp32_header, fp32_payload = encoded(np.zeros(NUMEL, np.float32))
    msgs = delta_messages(fp32_header, fp32_payload, base=0, init=True,
                    manifest=[("w", (NUMEL,), "float32")])
    return Case("field:init_by_non_master", msgs, frozenset({grpc.StatusCode.PERMISSION_DENIED}))


def hostile_pushes() -> st.SearchStrategy[Case]:
    return st.one_of(protocol_order(), truncated(), wrong_checksum(), flipped_payload(), bad_offsets(), size_lies(),
                     nonfinite(), decompression_bomb(), bad_codec_header(), garbage_payload(), bad_fields())
