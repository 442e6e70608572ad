"""Assembles the PS's model stream into verified fp32 vectors (the client half of `ps_server...downlink`).

A transfer is the bytes of one encoding: `fp32` is the vector itself, `grid_delta` an exact difference
from the vector the client holds (geofed.codec.model_delta). Every chunk carries a CRC-32: a damaged
chunk raises `ChunkDamaged` and the stream is reopened at the offset reached, so only the bad chunk is
fetched again. The vector that comes out is checked against the PS's sha256 before anyone sees it.
"""

from __future__ import annotations

import hashlib
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from geofed.codec import model_delta
from geofed.codec.errors import CodecError
from geofed.manifest import Manifest
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol.messages import manifest_from_proto

from . import grid_apply

FP32, GRID_DELTA = "fp32", "grid_delta"


class ChunkDamaged(Exception):
    """A chunk failed its CRC-32: reopen the stream at `resume_point()`."""


class TransferRestart(Exception):
    """The transfer cannot continue from where it is (a resume landed elsewhere, a bad digest): start over."""


@dataclass
class _Transfer:
    version: int
    encoding: str
    base_version: int
    buf: np.ndarray  # uint8, the transfer's bytes (an fp32 transfer writes straight into the vector)
    manifest: Manifest
    received: int = 0
    t0: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Received:
    version: int
    flat: np.ndarray
    manifest: Manifest
    seconds: float
    nbytes: int  # bytes of the transfer (what crossed the link)
    encoding: str


class ModelAssembler:
    """Takes ModelChunks in order; returns a `Received` when a transfer completes and verifies."""

    def __init__(self, decoders: dict[str, Callable[[np.ndarray, bytes, int, int], np.ndarray]] | None = None) -> None:
        self._t: _Transfer | None = None
        # A paradigm's own encodings (ClientParadigm.downlink_decoders): (held, bytes, base, version) -> vector.
        self.decoders = dict(decoders or {})

    def resume_point(self) -> tuple[int, int] | None:
        """(version, byte offset) of the transfer in progress, for StreamModelRequest."""
        t = self._t
        return (t.version, t.received) if t is not None and t.received else None

    def reset(self) -> None:
        self._t = None

    def take(self, chunk: pb.ModelChunk, held: tuple[int, np.ndarray] | None) -> Received | None:
        """Add one chunk; `held` is the (version, vector) the client holds, needed by a difference."""
        if zlib.crc32(chunk.data) != chunk.crc32:
            raise ChunkDamaged(f"model chunk at offset {chunk.offset} of version {chunk.version} failed its CRC-32")
        t = self._t
        if t is None or t.version != chunk.version:
            t = self._t = self._open(chunk)
        if chunk.offset != t.received:
            if chunk.offset < t.received:
                return None  # a repeat of bytes we already have
            self._t = None
            raise TransferRestart(f"model chunk at offset {chunk.offset}, expected {t.received}")
        end = t.received + len(chunk.data)
        if end > t.buf.size:
            self._t = None
            raise TransferRestart(f"model transfer overruns its announced {t.buf.size} bytes")
        t.buf[t.received : end] = np.frombuffer(chunk.data, dtype=np.uint8)
        t.received = end
        if end < t.buf.size:
            return None
        self._t = None
        flat = self._finish(t, held)
        if hashlib.sha256(memoryview(flat.view(np.uint8))).digest() != chunk.sha256:
            raise TransferRestart(f"model version {t.version} failed its sha256 check")
        return Received(t.version, flat, t.manifest, time.monotonic() - t.t0, t.buf.size, t.encoding)

    def _open(self, chunk: pb.ModelChunk) -> _Transfer:
        if chunk.offset != 0:
            raise TransferRestart(f"model transfer of version {chunk.version} resumed at {chunk.offset} unasked")
        encoding = chunk.encoding or FP32
        if encoding == FP32:
            if chunk.total_bytes % 4:
                raise TransferRestart("fp32 model size is not a whole number of values")
            buf = np.empty(chunk.total_bytes // 4, dtype=np.float32).view(np.uint8)
        elif encoding == GRID_DELTA or encoding in self.decoders:
            buf = np.empty(chunk.total_bytes, dtype=np.uint8)
        else:
            raise TransferRestart(f"unknown model encoding {encoding!r}")
        return _Transfer(chunk.version, encoding, chunk.base_version, buf, manifest_from_proto(chunk.manifest))

    def _finish(self, t: _Transfer, held: tuple[int, np.ndarray] | None) -> np.ndarray:
        if t.encoding == FP32:
            return t.buf.view(np.float32)
        if t.base_version == 0:  # a whole vector, coded as its difference from zeros
            try:
                held = (0, np.zeros(model_delta.numel_of(t.buf), dtype=np.float32))
            except CodecError as exc:
                raise TransferRestart(f"model transfer for version {t.version}: {exc}") from exc
        if held is None or held[0] != t.base_version:
            raise TransferRestart(f"a difference from version {t.base_version} came, "
                                  f"this client holds {held[0] if held else 'none'}")
        if t.encoding in self.decoders:
            try:
                return self.decoders[t.encoding](held[1], bytes(t.buf), t.base_version, t.version)
            except ValueError as exc:
                raise TransferRestart(f"{t.encoding} for version {t.version}: {exc}") from exc
        try:
            return grid_apply.decode(held[1], t.buf)
        except CodecError as exc:
            raise TransferRestart(f"model difference for version {t.version}: {exc}") from exc
