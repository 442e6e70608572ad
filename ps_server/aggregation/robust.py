"""Byzantine-robust combination of a round's deltas: coordinate-wise median or trimmed mean (paper §IV).

Order statistics need every delta of the round at once, so each decoded delta goes to its own
disk-backed memmap and the combination runs slice by slice: RAM stays O(clients × slice) + O(model),
while the deltas themselves sit on disk, never O(clients × model) in memory.
"""

from __future__ import annotations

import tempfile

import numpy as np

_SLICE = 1 << 20


def trimmed_mean(stack: np.ndarray, trim_fraction: float) -> np.ndarray:
    """Mean over axis 0 after dropping the floor(trim·K) smallest and largest values per coordinate."""
    k = int(np.floor(trim_fraction * stack.shape[0]))
    if k == 0:
        return stack.mean(axis=0)
    ordered = np.sort(stack, axis=0)
    return ordered[k : stack.shape[0] - k].mean(axis=0)


class RobustAccumulator:
    """Same interface as `DeltaAccumulator`, but keeps each delta (on disk) for order statistics."""

    def __init__(self, numel: int, method: str, trim_fraction: float, spool_dir: str | None = None) -> None:
        if method not in ("median", "trimmed_mean"):
            raise ValueError(f"unknown robust method {method!r}")
        self.numel, self.method, self.trim_fraction = numel, method, trim_fraction
        self.spool_dir = spool_dir
        self.deltas: list[np.memmap] = []
        self._files: list = []
        self._current: np.memmap | None = None
        self.weight = 0.0
        self.count = 0
        self.clients: set[str] = set()

    def add(self, offset: int, values: np.ndarray, scale: float) -> None:
        end = offset + values.size
        if offset < 0 or end > self.numel:
            raise ValueError(f"delta piece [{offset}, {end}) outside model of {self.numel} elements")
        if self._current is None:
            f = tempfile.TemporaryFile(dir=self.spool_dir)
            f.truncate(self.numel * 4)
            self._files.append(f)
            self._current = np.memmap(f, dtype=np.float32, mode="r+", shape=(self.numel,))
        self._current[offset:end] = values * np.float32(scale)

    def commit(self, client_id: str, weight: float, local_steps: int) -> None:
        if self._current is None:  # an empty model has no pieces; keep the count honest anyway
            self._current = np.memmap(tempfile.TemporaryFile(dir=self.spool_dir), dtype=np.float32, mode="w+",
                                      shape=(max(1, self.numel),))
        self.deltas.append(self._current)
        self._current = None
        self.weight += weight
        self.count += 1
        self.clients.add(client_id)

    def mean_(self, fednova: bool) -> np.ndarray:
        """The robust combination of the round's deltas (weights and FedNova do not apply)."""
        if not self.deltas:
            raise ValueError("no deltas accumulated")
        out = np.empty(self.numel, dtype=np.float32)
        for start in range(0, self.numel, _SLICE):
            s = slice(start, min(self.numel, start + _SLICE))
            stack = np.stack([d[s] for d in self.deltas])
            out[s] = np.median(stack, axis=0) if self.method == "median" else trimmed_mean(stack, self.trim_fraction)
        self.close()
        return out

    def close(self) -> None:
        self.deltas = []
        for f in self._files:
            f.close()
        self._files = []
