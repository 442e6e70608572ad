"""The entropy stage after quantisation: one interface over Huffman (paper), rANS and raw symbols.

A stage is built by the encoder from the global symbol histogram, serialises what the decoder needs
into the header (`params`), and codes one frame of symbols at a time so frames stay independent.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from geofed.codec.ans import AnsModel
from geofed.codec.errors import CodecError
from geofed.codec.header import Reader
from geofed.codec.huffman import LENGTH_LIMIT, HuffmanCode, code_lengths
from geofed.codec.huffman_lanes import LaneEncoder, decode_lanes, lane_syms_for, max_body_bytes

ENTROPY_KINDS = ("huffman", "ans", "none")
NEEDS_HISTOGRAM = {"huffman": True, "ans": True, "none": False}
MAX_LANE_SYMS = 1 << 16


class EntropyStage(ABC):
    """Codes frames of `bits`-wide unsigned symbols."""

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.dtype = np.dtype(np.uint8 if bits == 8 else np.uint16)
        self.alphabet = 1 << bits

    @abstractmethod
    def params(self) -> bytes:
        """What the decoder needs, for the header."""

    @abstractmethod
    def encoder(self, max_syms: int) -> Callable[[np.ndarray], bytes]:
        """A frame encoder for frames of up to `max_syms` symbols (it may keep work buffers)."""

    @abstractmethod
    def max_bytes(self, count: int) -> int:
        """Largest valid coded size of `count` symbols: frames claiming more are rejected unread."""

    @abstractmethod
    def decode(self, r: Reader, count: int) -> np.ndarray:
        """Exactly `count` symbols from the rest of `r`; CodecError if the bytes do not fit."""


class RawStage(EntropyStage):
    """No entropy coding: symbols as little-endian integers (fastest, 8 or 16 bits per element)."""

    def params(self) -> bytes:
        return b""

    def encoder(self, max_syms: int) -> Callable[[np.ndarray], bytes]:
        le = self.dtype.newbyteorder("<")
        return lambda syms: syms.astype(le, copy=False).tobytes()

    def max_bytes(self, count: int) -> int:
        return count * self.dtype.itemsize

    def decode(self, r: Reader, count: int) -> np.ndarray:
        body = r.rest()
        if len(body) != count * self.dtype.itemsize:
            raise CodecError(f"raw frame has {len(body)} bytes, {count} symbols need {count * self.dtype.itemsize}")
        return np.frombuffer(body, dtype=self.dtype.newbyteorder("<")).astype(self.dtype)


class HuffmanStage(EntropyStage):
    """Canonical length-limited Huffman; a one-symbol alphabet codes to zero bits."""

    _SINGLE, _CODE = 0, 1

    def __init__(self, bits: int, code: HuffmanCode | None, single: int, lane_syms: int) -> None:
        super().__init__(bits)
        self.code, self.single, self.lane_syms = code, single, lane_syms

    @classmethod
    def build(cls, bits: int, counts: np.ndarray, frame_elems: int) -> HuffmanStage:
        used = np.flatnonzero(counts)
        if used.size <= 1:
            return cls(bits, None, int(used[0]) if used.size else 0, 0)
        code = HuffmanCode(code_lengths(counts, LENGTH_LIMIT[bits]), LENGTH_LIMIT[bits])
        return cls(bits, code, -1, lane_syms_for(frame_elems))

    def params(self) -> bytes:
        if self.code is None:
            return struct.pack("<BI", self._SINGLE, self.single)
        return struct.pack("<BI", self._CODE, self.lane_syms) + self.code.to_bytes()

    @classmethod
    def read(cls, bits: int, r: Reader) -> HuffmanStage:
        mode, value = r.unpack("<BI", "Huffman mode")
        if mode == cls._SINGLE:
            if value >= 1 << bits:
                raise CodecError(f"single Huffman symbol {value} outside the {1 << bits}-symbol alphabet")
            return cls(bits, None, value, 0)
        if mode != cls._CODE:
            raise CodecError(f"unknown Huffman mode {mode}")
        if not 1 <= value <= MAX_LANE_SYMS:
            raise CodecError(f"Huffman lane size {value} outside [1, {MAX_LANE_SYMS}]")
        return cls(bits, HuffmanCode.read(r, 1 << bits, LENGTH_LIMIT[bits]), -1, value)

    def encoder(self, max_syms: int) -> Callable[[np.ndarray], bytes]:
        if self.code is None:

            def single(syms: np.ndarray) -> bytes:
                if (syms != self.single).any():
                    raise CodecError("input changed after the histogram pass (expected one symbol only)")
                return b""

            return single
        return LaneEncoder(self.code, self.lane_syms, max_syms).encode

    def max_bytes(self, count: int) -> int:
        return 0 if self.code is None else max_body_bytes(count, self.lane_syms, self.code.max_len)

    def decode(self, r: Reader, count: int) -> np.ndarray:
        if self.code is None:
            r.expect_end()
            return np.full(count, self.single, dtype=self.dtype)
        return decode_lanes(self.code, r, count, self.lane_syms)


class AnsStage(EntropyStage):
    """rANS via constriction with the histogram as a categorical model."""

    def __init__(self, bits: int, model: AnsModel) -> None:
        super().__init__(bits)
        self.model = model

    def params(self) -> bytes:
        return self.model.to_bytes()

    def encoder(self, max_syms: int) -> Callable[[np.ndarray], bytes]:
        return self.model.encode

    def max_bytes(self, count: int) -> int:
        return self.model.max_bytes(count)

    def decode(self, r: Reader, count: int) -> np.ndarray:
        return self.model.decode(r, count, self.dtype)


def build_stage(kind: str, bits: int, counts: np.ndarray | None, frame_elems: int) -> EntropyStage:
    """Encoder side: the stage for `kind`, fitted to the global histogram `counts`."""
    if kind == "none":
        return RawStage(bits)
    assert counts is not None
    if kind == "huffman":
        return HuffmanStage.build(bits, counts, frame_elems)
    if kind == "ans":
        return AnsStage(bits, AnsModel.from_counts(counts))
    raise CodecError(f"unknown entropy stage {kind!r}; known: {', '.join(ENTROPY_KINDS)}")


def read_stage(kind: str, bits: int, r: Reader) -> EntropyStage:
    """Decoder side: parse and validate the stage's header parameters."""
    if kind == "none":
        return RawStage(bits)
    if kind == "huffman":
        return HuffmanStage.read(bits, r)
    if kind == "ans":
        return AnsStage(bits, AnsModel.read(r, 1 << bits))
    raise CodecError(f"unknown entropy stage {kind!r}; known: {', '.join(ENTROPY_KINDS)}")
