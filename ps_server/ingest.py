"""Receiving one PushDelta: a pure state machine over header, ordered payload chunks and trailer.

The encoded payload is spooled (RAM up to a threshold, then a temp file), checksummed and decoded
*while it arrives* to validate it (shape, finiteness, norm); the decoded values stay in RAM while a
shared 1 GiB budget allows (`KEPT_DECODED`), so the aggregator folds them without a second decode;
beyond it, the aggregator decodes the spool once more into the running sum. Nothing touches the global
model before the trailer's checksum matches, so a broken push can never corrupt it.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import threading
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from geofed.codec import CodecError, decoder_for

from .aggregation.displacement import DeltaSketch
from .errors import CorruptPayload, InvalidPush, NotReady, PushRejected, PushTooLarge, check_first_model_codec
from .global_model import TensorEntry, validate_manifest

__all__ = ["PushHeader", "PushReceiver", "PushRejected", "ReceivedPush"]

_SPOOL_IN_RAM = 32 << 20  # encoded bytes kept in RAM before spilling to a temp file
_READ = 1 << 20
# Decoding is CPU-bound: more concurrent decoders than cores only multiplies their per-frame scratch
# memory (tens of MB each), so validation decodes take turns (pushes still *receive* concurrently).
_DECODE_SLOTS = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))


class _Budget:
    """Bytes of decoded pushes held in RAM at once: within it a push is decoded once (while it arrives)
    and folded from memory; beyond it, it is decoded again from its spool when folded."""

    def __init__(self, nbytes: int) -> None:
        self.free, self._lock = nbytes, threading.Lock()

    def take(self, nbytes: int) -> bool:
        with self._lock:
            if nbytes > self.free:
                return False
            self.free -= nbytes
            return True

    def give(self, nbytes: int) -> None:
        with self._lock:
            self.free += nbytes


KEPT_DECODED_BYTES = 1 << 30
KEPT_DECODED = _Budget(KEPT_DECODED_BYTES)


@dataclass
class PushHeader:
    """Protocol-neutral copy of DeltaHeader."""

    base_version: int
    upload_id: str
    codec_header: bytes
    payload_bytes: int
    num_tokens: int = 0
    num_samples: int = 0
    local_steps: int = 1
    init: bool = False
    manifest: tuple[TensorEntry, ...] = ()
    report: dict = field(default_factory=dict)
    shard_map: bytes = b""  # a sharded PS: digest of the shard map the frames were cut for (geofed.shard_map)


@dataclass
class ReceivedPush:
    """A fully received, checksum-verified, validated push whose payload sits in a spool."""

    client_id: str
    header: PushHeader
    codec_name: str
    numel: int
    norm: float
    spool: BinaryIO
    values: np.ndarray | None = None  # decoded while it arrived (within KEPT_DECODED), else None
    sketch: np.ndarray | None = None  # its count sketch (aggregation.displacement), built while it was validated

    def iter_values(self, max_numel: int):
        """(offset, float32 values): from memory when kept, else decoded again from the spool."""
        if self.values is not None:
            for start in range(0, self.values.size, _READ):
                yield start, self.values[start : start + _READ]
            return
        self.spool.seek(0)
        decoder = decoder_for(self.header.codec_header, max_numel=max_numel)
        while chunk := self.spool.read(_READ):
            yield from decoder.feed(chunk)
        decoder.finish()

    def iter_sparse(self, max_numel: int):
        """(absolute positions, float32 values) per frame of a sparse-coded push, decoded from the spool."""
        self.spool.seek(0)
        decoder = decoder_for(self.header.codec_header, max_numel=max_numel)
        while chunk := self.spool.read(_READ):
            for _off, (pos, values) in decoder.feed_sparse(chunk):
                yield pos, values
        decoder.finish()

    def close(self) -> None:
        self.spool.close()
        if self.values is not None:
            KEPT_DECODED.give(self.values.nbytes)
            self.values = None


def check_envelope(header: PushHeader, second: bool, max_upload_bytes: int) -> None:
    """What every receiver of a push checks first (one PS or a sharded PS's front): one header, an upload id
    of sane length, a declared size under the cap."""
    if second:
        raise InvalidPush("protocol", "a second header arrived in one push")
    if not header.upload_id or len(header.upload_id) > 128:
        raise InvalidPush("protocol", "upload_id must be 1..128 characters")
    if header.payload_bytes > max_upload_bytes:
        raise PushTooLarge("oversized", f"payload of {header.payload_bytes} bytes exceeds the cap of "
                           f"{max_upload_bytes} bytes")


class PushReceiver:
    """Validates one push as its parts arrive; raises PushRejected on the first problem."""

    def __init__(self, *, client_id: str, expected_numel: int | None, max_upload_bytes: int, max_init_numel: int):
        self.client_id = client_id
        self.expected_numel = expected_numel
        self.max_upload_bytes = max_upload_bytes
        self.max_init_numel = max_init_numel
        self.header: PushHeader | None = None
        self.received = 0
        self._sha = hashlib.sha256()
        self._spool: BinaryIO | None = None
        self._decoder = None
        self._decoded = 0
        self._sq_norm = 0.0
        self._sketch = DeltaSketch()
        self._done = False
        self._values: np.ndarray | None = None

    def on_header(self, header: PushHeader) -> None:
        check_envelope(header, self.header is not None, self.max_upload_bytes)
        if header.init:
            try:
                expected = validate_manifest(header.manifest, max_numel=self.max_init_numel)
            except ValueError as exc:
                raise InvalidPush("manifest", f"init manifest: {exc}") from exc
        else:
            if self.expected_numel is None:
                raise NotReady("no_model", "the PS has no model yet: the master must init")
            expected = self.expected_numel
        try:
            # A generous bound here so a wrong shape is reported as such; the exact check follows, and
            # nothing is decoded (or allocated) before it passes.
            self._decoder = decoder_for(header.codec_header, max_numel=max(expected, self.max_init_numel))
        except CodecError as exc:
            raise InvalidPush("codec", f"codec header: {exc}") from exc
        if self._decoder.numel != expected:
            raise InvalidPush("shape",
                f"delta has {self._decoder.numel} elements but the federation exchanges {expected}",
            )
        if header.init:
            check_first_model_codec(self._decoder.lossless)
        self.header = header
        self._spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_RAM)
        if not self._decoder.sparse and KEPT_DECODED.take(4 * expected):  # a sparse push is re-decoded: O(nnz)
            self._values = np.empty(expected, dtype=np.float32)

    def on_payload(self, offset: int, data: bytes) -> None:
        if self.header is None or self._spool is None:
            raise InvalidPush("protocol", "payload before header")
        if self._done:
            raise InvalidPush("protocol", "payload after trailer")
        if offset != self.received:
            raise InvalidPush("order", f"chunk at offset {offset}, expected offset {self.received}"
            )
        if self.received + len(data) > self.header.payload_bytes:
            raise InvalidPush("size",
                f"payload exceeds the declared {self.header.payload_bytes} bytes",
            )
        self.received += len(data)
        self._sha.update(data)
        self._spool.write(data)
        try:
            with _DECODE_SLOTS:
                if self._decoder.sparse:  # validated as (positions, values): work O(nonzeros), nothing kept
                    for _off, (pos, values) in self._decoder.feed_sparse(data):
                        self._check_values(values, 0, pos)
                    return
                for off, values in self._decoder.feed(data):
                    self._check_values(values, off)
                    if self._values is not None:
                        self._values[off : off + values.size] = values
                    self._decoded = off + values.size
        except CodecError as exc:
            raise InvalidPush("codec", f"payload: {exc}") from exc

    def _check_values(self, values: np.ndarray, offset: int, positions: np.ndarray | None = None) -> None:
        """Finite values only (at `offset`, or at `positions` when sparse); their squares go into the norm."""
        if not np.isfinite(values).all():
            i = int(np.flatnonzero(~np.isfinite(values))[0])
            bad = offset + i if positions is None else int(positions[i])
            raise InvalidPush("nonfinite", f"non-finite value (NaN/Inf) at element {bad}")
        wide = values.astype(np.float64)  # float32 squares overflow from |v| ≈ 1.8e19 on
        self._sq_norm += float(np.dot(wide, wide))
        if not self.header.init:  # Θ0 is no delta: no displacement to budget
            self._sketch.add(wide, offset, positions)

    def on_trailer(self, sha256: bytes) -> ReceivedPush:
        if self.header is None or self._spool is None:
            raise InvalidPush("protocol", "trailer before header")
        self._done = True
        if self.received != self.header.payload_bytes:
            raise InvalidPush("truncated",
                f"payload truncated: received {self.received} of {self.header.payload_bytes} bytes",
            )
        if sha256 != self._sha.digest():
            raise CorruptPayload("checksum", "payload checksum mismatch")
        try:
            self._decoder.finish()
        except CodecError as exc:
            raise InvalidPush("codec", f"payload: {exc}") from exc
        norm = math.sqrt(self._sq_norm)
        if not math.isfinite(norm):
            raise InvalidPush("nonfinite", "delta norm overflows float")
        push = ReceivedPush(
            self.client_id, self.header, self._decoder.codec_name, self._decoder.numel, norm, self._spool,
            self._values, self._sketch.values,
        )
        self._spool, self._values = None, None
        return push

    def abort(self) -> None:
        """Drop whatever was spooled (stream broke or was rejected)."""
        if self._spool is not None:
            self._spool.close()
            self._spool = None
        if self._values is not None:
            KEPT_DECODED.give(self._values.nbytes)
            self._values = None
