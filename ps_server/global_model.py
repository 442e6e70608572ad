"""The authoritative global model: one flat fp32 buffer + name/shape manifest, published per version.

A published snapshot is never mutated: streams that are still sending version v keep a reference to
its buffer while the aggregator builds v+1 in another one (so at most ~3 model-sized buffers exist).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the manifest; the PS holds every tensor as fp32 regardless of `dtype`."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def manifest_numel(manifest: tuple[TensorEntry, ...]) -> int:
    """Total elements a manifest describes."""
    return sum(t.numel for t in manifest)


def validate_manifest(manifest: tuple[TensorEntry, ...], *, max_numel: int) -> int:
    """Check names are unique and shapes sane; return the element count."""
    if not manifest:
        raise ValueError("manifest is empty")
    names = [t.name for t in manifest]
    if len(set(names)) != len(names):
        raise ValueError("manifest has duplicate tensor names")
    for t in manifest:
        if any(d < 0 for d in t.shape):
            raise ValueError(f"tensor {t.name!r} has a negative dimension")
    total = manifest_numel(manifest)
    if total <= 0 or total > max_numel:
        raise ValueError(f"manifest describes {total} elements (allowed 1..{max_numel})")
    return total


def sha256_of(flat: np.ndarray) -> bytes:
    """Digest of the buffer's bytes, computed in slices to avoid a bytes copy of the model."""
    h = hashlib.sha256()
    view = memoryview(flat.reshape(-1).view(np.uint8))
    step = 8 << 20
    for start in range(0, len(view), step):
        h.update(view[start : start + step])
    return h.digest()


@dataclass(frozen=True)
class Snapshot:
    """One published global version."""

    version: int
    flat: np.ndarray
    sha256: bytes
    manifest: tuple[TensorEntry, ...]

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes


class GlobalModel:
    """Holds the current snapshot and wakes model streams when a new one is published."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._cond = threading.Condition()
        self.closed = False

    def publish(self, version: int, flat: np.ndarray, manifest: tuple[TensorEntry, ...]) -> Snapshot:
        """Freeze `flat` as `version` and notify every waiting stream."""
        flat.flags.writeable = False
        snap = Snapshot(version, flat, sha256_of(flat), manifest)
        with self._cond:
            self._snapshot = snap
            self._cond.notify_all()
        return snap

    def current(self) -> Snapshot | None:
        return self._snapshot

    @property
    def version(self) -> int:
        snap = self._snapshot
        return snap.version if snap else 0

    def wait_newer(self, version: int, timeout: float) -> Snapshot | None:
        """Block until a snapshot newer than `version` exists (or timeout / close); return it or None."""
        with self._cond:
            self._cond.wait_for(
                lambda: self.closed or (self._snapshot is not None and self._snapshot.version > version), timeout
            )
            snap = self._snapshot
        if snap is not None and snap.version > version:
            return snap
        return None

    def close(self) -> None:
        """Release every waiting stream (server shutdown)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
