"""The authoritative global model: one flat fp32 buffer + name/shape manifest, published per version.

A published snapshot is never mutated: streams that are still sending version v keep a reference to
its buffer while the aggregator builds v+1 in another one (so at most ~3 model-sized buffers exist).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

import numpy as np

from geofed.manifest import Manifest, TensorEntry, manifest_numel, validate_manifest

__all__ = ["GlobalModel", "Manifest", "Snapshot", "TensorEntry", "manifest_numel", "sha256_of", "validate_manifest"]


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
    manifest: Manifest

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes


class GlobalModel:
    """Holds the current snapshot and wakes model streams when a new one is published."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._cond = threading.Condition()
        self.closed = False

    def publish(self, version: int, flat: np.ndarray, manifest: Manifest) -> Snapshot:
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
