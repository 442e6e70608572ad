"""The sparse mode's model stream: each published version is the previous one plus a sparse increment,
and a client holding version v receives the increments v+1 … newest (encoding `sparse_delta`), so the
downlink shrinks with the uplink. A client whose version left the history, or that holds
none, gets the whole fp32 vector. The increments are built by `strategies.sparse_pretrain`.

Memory: `history` increments of O(nonzeros) bytes each, never a model copy. The history is not
checkpointed: after a PS restart every client gets one whole vector, then increments again.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from geofed.codec.sparse_increments import pack_chain

from ..global_model import Snapshot
from .downlink import Downlink, full_downlink

log = logging.getLogger("geofed.ps")

SPARSE_DELTA = "sparse_delta"


class SparseStream:
    """Keeps the last `history` increments by the version they produce (thread-safe)."""

    def __init__(self, history: int) -> None:
        self.history = max(1, history)
        self._incs: OrderedDict[int, bytes] = OrderedDict()  # version -> increment from version - 1
        self._lock = threading.Lock()

    def record(self, version: int, increment: bytes) -> None:
        """`increment` turns version - 1 into `version` (a re-applied version replaces its old increment)."""
        with self._lock:
            for v in [v for v in self._incs if v >= version]:  # a dropped round's increment, or a rewind
                del self._incs[v]
            self._incs[version] = increment
            while len(self._incs) > self.history:
                self._incs.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._incs.clear()

    def state_dict(self, snapshot: Snapshot | None) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        self.clear()

    def downlink(self, snapshot: Snapshot, have_version: int) -> Downlink:
        with self._lock:
            chain = [self._incs.get(v) for v in range(have_version + 1, snapshot.version + 1)]
        full = full_downlink(snapshot)
        if have_version <= 0 or not chain or any(c is None for c in chain):
            return full
        data = pack_chain(chain)
        if len(data) >= full.nbytes:
            return full
        log.debug("event=downlink version=%d have=%d encoding=%s bytes=%d", snapshot.version, have_version,
                  SPARSE_DELTA, len(data))
        return Downlink(snapshot.version, SPARSE_DELTA, memoryview(data), snapshot.sha256, snapshot.manifest,
                        have_version)
