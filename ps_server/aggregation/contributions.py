"""Contribution accounting: which client (and site) put what into the global model.

Per client, over the run and over a window of the latest applied versions:

- **tokens**: server-vouched tokens behind its applied deltas (the guard's count, never the client's word);
- **update mass**: Σ w·‖δ̃‖ of its applied deltas, where w is the weight the strategy credited (tokens ×
  staleness discount) and ‖δ̃‖ the delta's L2 norm after the guard's norm bound and the federation's
  `clip_norm`, i.e. how far the delta moved the round's weighted sum;
- **share**: its update mass over everyone's, in the window and over the run (shares of a set of
  clients add up, so a site's share is the sum of its clients');
- **compute-seconds**: the vouched tokens over the throughput the client reports, never more than the
  wall time the PS saw pass since that client's previous accepted delta (or since it first saw it).

A delta is credited when the round holding it becomes a version; a dropped round credits nothing, so the
figures always describe what is in the model. Plain Python, O(clients × window) state, no numpy or gRPC:
an observer of the Aggregator's events (`notify`), which it publishes under its lock.

**Goodput** is the federation's share of trained tokens that reached a published model: the tokens clients
reported with the deltas that are in a published version, over those reported with every delta the PS
received (each upload once, whatever became of it: applied, stale, refused; the PS core calls `received`).
Both sides count the clients' own figures, so an honest federation that loses nothing scores 100 %.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .events import DeltaFolded, Event, RoundClosed, RoundDiscarded, RoundDropped


def applied_mass(weight: float, norm: float, clip_norm: float) -> float:
    """w·‖δ̃‖: the credited weight times the norm after clipping (`clip_norm` 0 = no clipping)."""
    if not (math.isfinite(norm) and norm > 0 and weight > 0):
        return 0.0
    clipped = min(norm, clip_norm) if clip_norm > 0 else norm
    return weight * clipped


@dataclass
class Contribution:
    """One client's credited totals over the run."""

    deltas: int = 0
    tokens: int = 0
    mass: float = 0.0
    compute_s: float = 0.0


@dataclass(frozen=True)
class _Folded:
    tokens: int
    mass: float
    compute_s: float
    reported_tokens: int


_RECEIVED_KEPT = 65536  # upload ids remembered so that a retransmitted delta counts once


class Contributions:
    """Credits applied deltas per client; `window` = applied versions the windowed share looks back over."""

    def __init__(self, window: int = 20, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = max(1, window)
        self.clock = clock
        self.totals: dict[str, Contribution] = {}
        self.recent: deque[dict[str, float]] = deque(maxlen=self.window)  # per applied version: client -> mass
        self._pending: dict[str, list[_Folded]] = {}  # the open round's deltas, credited when it is applied
        self._since: dict[str, float] = {}  # client -> clock of its last accepted delta, or of first sight
        self.tokens_received = 0  # reported with every delta received (goodput's denominator)
        self.tokens_applied = 0  # reported with the deltas in published versions (its numerator)
        self._received: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()  # the status page and metrics read while the aggregator writes

    def notify(self, event: Event) -> None:
        """Account for what the Aggregator did: a delta folded, its round applied, dropped or discarded."""
        match event:
            case DeltaFolded():
                self.folded(event.client_id, tokens=event.tokens, weight=event.weight, norm=event.norm,
                            clip_norm=event.clip_norm, tokens_per_s=event.tokens_per_s,
                            reported_tokens=event.reported_tokens)
            case RoundClosed():
                self.applied()
            case RoundDropped() | RoundDiscarded():
                self.dropped()

    def seen(self, client_id: str) -> None:
        """The PS saw `client_id` (a join): the start of its first compute interval."""
        with self._lock:
            self._since.setdefault(client_id, self.clock())

    def received(self, client_id: str, upload_id: str, reported_tokens: int) -> None:
        """A delta arrived (or was refused on its header) with the tokens its client reported training on it."""
        key = (client_id, upload_id)
        with self._lock:
            if key in self._received:
                return
            self._received[key] = None
            if len(self._received) > _RECEIVED_KEPT:
                self._received.popitem(last=False)
            self.tokens_received += max(0, reported_tokens)

    def folded(self, client_id: str, *, tokens: int, weight: float, norm: float, clip_norm: float,
               tokens_per_s: float, reported_tokens: int = 0) -> None:
        """A delta went into the open round with this vouched token count, credited weight and bounded norm
        (`reported_tokens`: what its client reported, for goodput)."""
        claimed = tokens / tokens_per_s if tokens_per_s > 0 and math.isfinite(tokens_per_s) else 0.0
        with self._lock:
            now = self.clock()
            observed = max(0.0, now - self._since.get(client_id, now))
            self._since[client_id] = now
            entry = _Folded(max(0, tokens), applied_mass(weight, norm, clip_norm), min(claimed, observed),
                            max(0, reported_tokens))
            self._pending.setdefault(client_id, []).append(entry)

    def applied(self) -> None:
        """The open round became a version: credit its deltas."""
        masses: dict[str, float] = {}
        with self._lock:
            for client_id, entries in self._pending.items():
                total = self.totals.setdefault(client_id, Contribution())
                for e in entries:
                    total.deltas += 1
                    total.tokens += e.tokens
                    total.mass += e.mass
                    total.compute_s += e.compute_s
                    self.tokens_applied += e.reported_tokens
                    masses[client_id] = masses.get(client_id, 0.0) + e.mass
            self.recent.append(masses)
            self._pending = {}

    def dropped(self) -> None:
        """The open round was dropped: nothing of it is in the model, nothing is credited."""
        with self._lock:
            self._pending = {}

    # ---- views ------------------------------------------------------------------------------------

    def goodput(self) -> dict[str, float]:
        """{tokens_received, tokens_applied, goodput}: goodput in [0, 1], 0 before any delta arrived."""
        with self._lock:
            received, applied = self.tokens_received, self.tokens_applied
        return {"tokens_received": received, "tokens_applied": applied,
                "goodput": min(1.0, applied / received) if received > 0 else 0.0}

    def report(self) -> dict[str, dict]:
        """client -> {deltas, tokens, mass, compute_s, share_window, share_run} (shares in [0, 1])."""
        with self._lock:
            totals = {k: asdict(v) for k, v in self.totals.items()}
            windowed: dict[str, float] = {}
            for masses in self.recent:
                for client_id, mass in masses.items():
                    windowed[client_id] = windowed.get(client_id, 0.0) + mass
        run_total = sum(c["mass"] for c in totals.values())
        window_total = sum(windowed.values())
        return {
            client_id: {
                **c,
                "share_window": windowed.get(client_id, 0.0) / window_total if window_total > 0 else 0.0,
                "share_run": c["mass"] / run_total if run_total > 0 else 0.0,
            }
            for client_id, c in totals.items()
        }

    # ---- durability -------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Totals and the window; the open round's deltas go with it (unpersisted), and so do the clocks."""
        with self._lock:
            return {"totals": {k: asdict(v) for k, v in self.totals.items()},
                    "recent": [dict(m) for m in self.recent],
                    "tokens_received": self.tokens_received, "tokens_applied": self.tokens_applied}

    def load_state_dict(self, state: dict) -> None:
        with self._lock:
            self.totals = {str(k): Contribution(**v) for k, v in state.get("totals", {}).items()}
            self.recent = deque(({str(k): float(v) for k, v in m.items()} for m in state.get("recent", [])),
                                maxlen=self.window)
            self._pending, self._since = {}, {}
            self.tokens_received = int(state.get("tokens_received", 0))
            self.tokens_applied = int(state.get("tokens_applied", 0))
