"""What the PS streams to a client: a `Downlink` (an encoding plus its bytes), built by a `ModelStream`.

`Strategy.downlink(snapshot, have_version)` returns a `Downlink`; the gRPC layer only chunks its bytes. An
encoding names how the client turns the bytes (plus the version it holds, `base_version`) into the new
vector: `fp32` is the whole vector, `grid_delta` an exact difference (geofed.codec.model_delta). A
future sparse mode adds its own encoding here and travels the same way.

`GridStream` is the default for the whole-model paradigms: it rounds each published version onto
power-of-two grids (server-side error feedback, see model_delta), keeps the last `history` published
vectors, and sends a client the exact compressed difference from the one it holds; a client without a
kept version gets the whole published vector, as its difference from zeros (up to ZEROS_MAX_NUMEL values)
or in fp32, whichever is smaller. Plain numpy (compiled passes in geofed.codec); no gRPC.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from geofed.codec import model_delta

from ..global_model import Manifest, Snapshot, sha256_of

log = logging.getLogger("geofed.ps")

FP32, GRID_DELTA = "fp32", "grid_delta"
ZEROS_MAX_NUMEL = 1 << 24
"""Largest vector sent whole as its difference from zeros (~14 bits/value): beyond it, coding it costs the
PS seconds of CPU (7.6 s at 124M values) that a joining client would wait for, so it goes as fp32."""
ENCODINGS = (FP32, GRID_DELTA)


def build_stream(encoding: str, steps: float, history: int) -> GridStream | None:
    """The federation's downlink stream; None sends every client the whole published vector."""
    return GridStream(steps, history) if encoding == GRID_DELTA else None


@dataclass(frozen=True)
class Downlink:
    """One transfer: `data` decodes, with the client's `base_version` vector (0: zeros), to the `version` vector."""

    version: int
    encoding: str
    data: memoryview
    sha256: bytes  # of the fp32 vector the client ends with
    manifest: Manifest
    base_version: int = 0  # 0: `data` stands alone

    @property
    def nbytes(self) -> int:
        return len(self.data)

    @classmethod
    def full(cls, version: int, flat: np.ndarray, sha256: bytes, manifest: Manifest) -> Downlink:
        return cls(version, FP32, memoryview(flat.reshape(-1).view(np.uint8)), sha256, manifest)


def full_downlink(snapshot: Snapshot) -> Downlink:
    """The whole published vector, as every paradigm could always send it."""
    return Downlink.full(snapshot.version, snapshot.flat, snapshot.sha256, snapshot.manifest)


@dataclass(frozen=True)
class _Published:
    version: int
    flat: np.ndarray  # on its grid, read-only
    exps: np.ndarray
    sha256: bytes


class GridStream:
    """Publishes grid-rounded versions and builds exact differences between them (thread-safe).

    The published vector is this PS's view: its grids follow the versions it has published, so two PS
    groups (or one PS before and after adopting another's model) may round the same version differently;
    each client is exact against the PS it streams from, and the true vector is what groups agree on.

    Memory: `history` published vectors (fp32 each) plus a few cached encodings; a client whose version
    has left the history gets the whole vector. A checkpoint keeps the grids of its version, so a restarted
    PS publishes that version bit for bit again; the history starts empty (clients get one full transfer).
    """

    def __init__(self, steps: float, history: int, cache: int = 4) -> None:
        self.steps, self.history, self.cache_size = steps, max(1, history), cache
        self._published: OrderedDict[int, _Published] = OrderedDict()
        self._cache: OrderedDict[tuple[int, int], Downlink] = OrderedDict()
        self._restored: tuple[int, np.ndarray] | None = None
        self._lock = threading.Lock()

    def state_dict(self, snapshot: Snapshot | None) -> dict:
        """The grids of `snapshot` (the version being checkpointed), so a restart publishes it bit for bit."""
        if snapshot is None:
            return {}
        pub = self.published(snapshot)
        return {"version": pub.version, "exps": pub.exps.astype(np.float32)}

    def load_state_dict(self, state: dict) -> None:
        with self._lock:
            self._published.clear()
            self._cache.clear()
            self._restored = (int(state["version"]), np.asarray(state["exps"]).astype(np.int16)) if state else None

    def published(self, snapshot: Snapshot) -> _Published:
        """The grid version of `snapshot` (computed once, in version order of first request)."""
        with self._lock:
            pub = self._published.get(snapshot.version)
            if pub is not None:
                return pub
            prev = next(reversed(self._published.values()), None)
            if prev is not None and (prev.version > snapshot.version or prev.flat.size != snapshot.flat.size):
                prev = None  # an older snapshot asked for late, or a re-seed: start a fresh grid
            restored = self._restored
            if prev is None and restored is not None and restored[0] == snapshot.version:
                exps = restored[1]  # the checkpointed version: the same grids as before the restart
            else:
                exps = model_delta.choose_exponents(snapshot.flat, prev.flat if prev else None,
                                                    prev.exps if prev else None, self.steps)
            flat = model_delta.snap_to_grid(snapshot.flat, exps)
            flat.flags.writeable = False
            pub = _Published(snapshot.version, flat, exps, sha256_of(flat))
            self._published[snapshot.version] = pub
            while len(self._published) > self.history:
                self._published.popitem(last=False)
            return pub

    def downlink(self, snapshot: Snapshot, have_version: int) -> Downlink:
        key = (snapshot.version, have_version)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        pub = self.published(snapshot)
        with self._lock:
            have = self._published.get(have_version)
        out = Downlink.full(pub.version, pub.flat, pub.sha256, snapshot.manifest)
        if have is not None and have.version != pub.version:
            base_flat, base_exps, base_version = have.flat, have.exps, have.version
        elif pub.flat.size <= ZEROS_MAX_NUMEL:  # the whole vector as its difference from zeros, if smaller
            base_flat, base_exps, base_version = np.zeros_like(pub.flat), pub.exps, 0
        else:
            base_flat = None
        data = model_delta.encode(base_flat, base_exps, pub.flat, pub.exps) if base_flat is not None else None
        if data is not None and len(data) < out.nbytes:
            out = Downlink(pub.version, GRID_DELTA, memoryview(data), pub.sha256, snapshot.manifest, base_version)
        log.debug("event=downlink version=%d have=%d encoding=%s bytes=%d", pub.version, have_version,
                  out.encoding, out.nbytes)
        with self._lock:
            self._cache[key] = out
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out
