"""Byzantine-robust combination: coordinate-wise median or trimmed mean (paper §IV), asynchronous too.

A round of one delta (the default asynchronous K = 1) makes an order statistic a no-op: the median of one
delta is that delta. So the statistics run over a *window*: the latest delta of each of up to
`robust_window` distinct clients. In async mode the window outlives rounds (every outer step applies the
median of what recent clients sent, a client's new delta replacing its previous one); in sync mode it holds
the round's deltas only. Either way there is one entry per client, so the trim count and the median are
over clients, not pushes.

Each entry is weighted by its staleness factor, evaluated when the round closes, exactly as the mean path
weights a delta: (1 + s)^-a for s versions behind (or 1 under sync's late_policy "accept"); an entry
beyond max_staleness drops out. Token counts play no part: a poisoned client must not buy influence.

Order statistics need every entry at once, so each sits in its own disk-backed memmap and the combination
runs slice by slice: RAM stays O(clients × slice) + O(model), never O(clients × model).
"""

from __future__ import annotations

import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from geofed.config import AggregationConfig

from ..errors import StaleDelta
from .rounds import admit

_SLICE = 1 << 20


def trimmed_mean(stack: np.ndarray, trim_fraction: float) -> np.ndarray:
    """Mean over axis 0 after dropping the floor(trim·K) smallest and largest values per coordinate."""
    k = int(np.floor(trim_fraction * stack.shape[0]))
    if k == 0:
        return stack.mean(axis=0)
    ordered = np.sort(stack, axis=0)
    return ordered[k : stack.shape[0] - k].mean(axis=0)


@dataclass
class _Entry:
    values: np.memmap
    file: BinaryIO
    base_version: int


class RobustWindow:
    """The latest delta of up to `capacity` distinct clients, each in its own disk-backed memmap."""

    def __init__(self, numel: int, method: str, trim_fraction: float, capacity: int,
                 spool_dir: str | None = None) -> None:
        if method not in ("median", "trimmed_mean"):
            raise ValueError(f"unknown robust method {method!r}")
        self.numel, self.method, self.trim_fraction = numel, method, trim_fraction
        self.capacity, self.spool_dir = capacity, spool_dir
        self.entries: OrderedDict[str, _Entry] = OrderedDict()

    def spool(self) -> tuple[np.memmap, BinaryIO]:
        """A fresh zeroed memmap (and its file) for one incoming delta."""
        f = tempfile.TemporaryFile(dir=self.spool_dir)
        f.truncate(max(1, self.numel) * 4)
        return np.memmap(f, dtype=np.float32, mode="r+", shape=(max(1, self.numel),)), f

    def put(self, client_id: str, values: np.memmap, file: BinaryIO, base_version: int) -> None:
        """Make this the client's entry (replacing its previous one); the oldest client beyond capacity leaves."""
        self._drop(client_id)
        self.entries[client_id] = _Entry(values, file, base_version)
        while len(self.entries) > self.capacity:
            self._drop(next(iter(self.entries)))

    def combine(self, cfg: AggregationConfig, version: int) -> tuple[np.ndarray, int]:
        """The robust combination of the staleness-weighted entries at `version`, and how many took part."""
        factors: dict[str, float] = {}
        for client_id, entry in list(self.entries.items()):
            try:
                factors[client_id] = admit(cfg, entry.base_version, version).factor
            except StaleDelta:  # too old to count any more
                self._drop(client_id)
        if not factors:
            raise ValueError("no deltas in the robust window")
        out = np.empty(self.numel, dtype=np.float32)
        for start in range(0, self.numel, _SLICE):
            s = slice(start, min(self.numel, start + _SLICE))
            stack = np.stack([self.entries[c].values[s] * np.float32(f) for c, f in factors.items()])
            out[s] = np.median(stack, axis=0) if self.method == "median" else trimmed_mean(stack, self.trim_fraction)
        return out, len(factors)

    def clear(self) -> None:
        for client_id in list(self.entries):
            self._drop(client_id)

    def _drop(self, client_id: str) -> None:
        entry = self.entries.pop(client_id, None)
        if entry is not None:
            entry.file.close()


class RobustRound:
    """One round's accumulator over a `RobustWindow` (the Accumulator protocol, plus the base version)."""

    def __init__(self, window: RobustWindow, cfg: AggregationConfig, version: int) -> None:
        self.window, self.cfg, self.version = window, cfg, version
        self.numel = window.numel
        self.weight = 0.0
        self.mass = 0.0
        self.count = 0
        self.clients: set[str] = set()
        self._current: tuple[np.memmap, BinaryIO] | None = None

    def add(self, offset: int, values: np.ndarray, scale: float) -> None:
        end = offset + values.size
        if offset < 0 or end > self.numel:
            raise ValueError(f"delta piece [{offset}, {end}) outside model of {self.numel} elements")
        if self._current is None:
            self._current = self.window.spool()
        self._current[0][offset:end] = values * np.float32(scale)

    def commit(self, client_id: str, weight: float, local_steps: int, *, base_version: int) -> None:
        """The delta just added becomes `client_id`'s window entry, computed against `base_version`."""
        values, file = self._current if self._current is not None else self.window.spool()
        self._current = None
        self.window.put(client_id, values, file, base_version)
        self.weight += weight
        self.count += 1
        self.clients.add(client_id)

    def combine(self) -> np.ndarray:
        """The round's update: the robust combination over the window at this round's version."""
        out, _ = self.window.combine(self.cfg, self.version)
        return out

    def close(self) -> None:
        if self._current is not None:
            self._current[1].close()
            self._current = None
