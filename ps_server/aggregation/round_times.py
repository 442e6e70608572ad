"""The PS's measured client round times, and the settings tuned from them.

A client's round time is measured at the PS, from the later of the publication of the version its delta was
trained on and the arrival of its previous delta, to the arrival of this one: download + local training +
upload, without the time it waited for a sync round to close, or for the other sites after its site's round
share put a delta off (its round ends when the delta first arrives; a retry of that delta is not timed). From
these the PS sets the sync straggler timeout (autotune.straggler_timeout) and advises sync or async. With
aggregation.mode 'auto' the advice is the live mode: `retune` runs only right after a round closed (sync) or an
outer step (async), when nothing is buffered, so a switch there loses no delta and counts none twice; the
aggregator then runs the new mode.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from geofed.config import FederationConfig, ServerConfig
from geofed.tuning import initial_mode, mode_advice, straggler_timeout_choice

log = logging.getLogger("geofed.ps")

_VERSIONS_KEPT = 256  # publication times remembered (a delta more versions behind than this is not timed)
# A client with no delta this long is gone: the sync quorum's notion (ServerConfig.client_timeout_s), by default.
GONE_AFTER_S: float = ServerConfig.model_fields["client_timeout_s"].default


class RoundTimes:
    """Per-client round times and what the PS tunes from them; called under the aggregator's lock."""

    def __init__(self, fed: FederationConfig, clock: Callable[[], float] = time.monotonic, *,
                 gone_after_s: float = GONE_AFTER_S) -> None:
        self.fed, self.cfg, self.clock = fed, fed.autotune, clock
        self.gone_after_s = gone_after_s
        self._published: OrderedDict[int, float] = OrderedDict()
        self._last: dict[str, float] = {}  # client -> arrival of its last delta
        self._held: dict[str, int] = {}  # client -> base version of its delta the round share put off
        self._rounds: dict[str, deque[float]] = {}
        self.straggler_timeout_s = fed.aggregation.straggler_timeout_s
        self.straggler_reason = "configured aggregation.straggler_timeout_s"
        self.configured = fed.aggregation.mode
        self.mode: str = initial_mode(self.configured)  # the live mode: the configured one unless it is 'auto'
        self.mode_advice: str = self.mode
        self.mode_reason = ("auto starts sync (no spread measured yet)" if self.configured == "auto"
                            else "the configured mode (no spread measured yet)")
        self.spread = 0.0  # slowest / fastest client round time (0 until two clients are timed)

    def published(self, version: int) -> None:
        self._published[version] = self.clock()
        while len(self._published) > _VERSIONS_KEPT:
            self._published.popitem(last=False)

    def arrived(self, client_id: str, base_version: int) -> None:
        """A delta trained on `base_version` arrived: time the client's round when its start is known."""
        now = self.clock()
        if self._held.pop(client_id, None) == base_version:  # the delta put off, sent again: timed when put off
            self._last[client_id] = now
            return
        starts = [t for t in (self._published.get(base_version), self._last.get(client_id)) if t is not None]
        self._last[client_id] = now
        if starts:
            window = self._rounds.setdefault(client_id, deque(maxlen=self.cfg.round_window))
            window.append(now - max(starts))

    def put_off(self, client_id: str, base_version: int) -> None:
        """A rule (the round share, say) put off a delta trained on `base_version`: the client's round ends here,
        as if it had landed. What follows is waiting for other sites (it pushes the same delta again, timed from now, or
        trains on a newer version), so the wait never counts as its round time."""
        self.arrived(client_id, base_version)
        self._held[client_id] = base_version

    def per_client(self) -> dict[str, float]:
        """Each client's median round time; a client with no delta for `gone_after_s` is gone and left out.

        A client whose rounds grew stays in: gone is measured against `gone_after_s`, not against its own
        earlier round times, so a client whose tuned interval lengthens (5 s to 30 s, say) is still counted
        and 'auto' does not go back to sync to wait for it.
        """
        now = self.clock()
        return {c: statistics.median(w) for c, w in self._rounds.items() if now - self._last[c] <= self.gone_after_s}

    def current(self, medians: dict[str, float] | None = None) -> dict[str, float]:
        """What the mode advice compares: each client's median round time (`per_client`, or `medians` already
        taken from it), or the round it is in when that has already run longer (it is at least that slow now;
        its median catches up only rounds later)."""
        now, out = self.clock(), {}
        for client, median in (self.per_client() if medians is None else medians).items():
            start = self._round_start(client)
            out[client] = median if start is None else max(median, now - start)
        return out

    def _round_start(self, client_id: str) -> float | None:
        """When the client's current round began, as the PS can tell: the first publication after its last
        delta arrived (it cannot train on a newer model before one exists, and in sync it waits for that one).
        None while there has been none: it waits for one (retune runs right after a publication, so only a
        direct caller sees this)."""
        last = self._last[client_id]
        return next((t for t in self._published.values() if t >= last), None)

    def retune(self) -> None:
        """After a round closes (nothing buffered): the next sync round's straggler timeout, and the mode advice,
        applied under 'auto'; changes are logged."""
        rounds = self.per_client()
        positive = {c: s for c, s in self.current(rounds).items() if s > 0}
        if len(positive) >= 2:
            self.spread = max(positive.values()) / min(positive.values())
        # 'auto' keeps the timeout tuned while async runs too, so a switch to sync starts with a measured one.
        if self.cfg.straggler_timeout and self.configured in ("sync", "auto"):
            value, reason = straggler_timeout_choice(
                rounds, q=self.cfg.straggler_quantile, margin=self.cfg.straggler_margin,
                min_s=self.cfg.straggler_min_s, max_s=self.cfg.straggler_max_s,
                fallback_s=self.fed.aggregation.straggler_timeout_s)
            if value != self.straggler_timeout_s:
                log.info("event=autotune knob=straggler_timeout value=%g reason=%r", value, reason)
            self.straggler_timeout_s, self.straggler_reason = value, reason
        mode, reason = mode_advice(positive, self.mode_advice, async_above=self.cfg.async_above,  # type: ignore[arg-type]
                                   sync_below=self.cfg.sync_below)
        applied = self.configured == "auto"
        if mode != self.mode_advice:
            log.info("event=autotune knob=aggregation_mode value=%s running=%s applied=%s reason=%r", mode,
                     mode if applied else self.mode, str(applied).lower(), reason)
        self.mode_advice, self.mode_reason = mode, reason
        if applied:
            self.mode = mode

    def restore_mode(self, mode: object) -> bool:
        """Resume an 'auto' federation in the mode its checkpoint ran (True when taken; a fixed mode stands)."""
        if self.configured != "auto" or mode not in ("sync", "async"):
            return False
        self.mode = self.mode_advice = str(mode)
        self.mode_reason = "restored from the checkpoint"
        return True
