"""Auto-tuning policies: pure functions from measurements to a setting and its reason.

Each returns (value, reason in words); the caller applies the value and logs
`event=autotune knob=<name> value=<v> reason=<...>` when it changes. No I/O, no clocks: the client agent
and the PS measure, these decide. The codec's bit-width policy lives with the codec
(`geofed.codec.policy.codec_choice`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal


class TuningError(ValueError):
    """A measurement or setting a tuner cannot plan with (negative, NaN, an empty range...)."""


def _positive(name: str, value: float) -> float:
    if not isinstance(value, int | float) or math.isnan(value) or value <= 0:
        raise TuningError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    if not isinstance(value, int | float) or math.isnan(value) or value < 0:
        raise TuningError(f"{name} must be >= 0, got {value!r}")
    return float(value)


def _range(name: str, lo: float, hi: float) -> None:
    _positive(f"{name} lower bound", lo)
    _positive(f"{name} upper bound", hi)
    if lo > hi:
        raise TuningError(f"{name} range is empty: lower bound {lo:g} > upper bound {hi:g}")


def round_up_2(x: float) -> float:
    """`x` rounded *up* to two significant digits (16.4 -> 17, 123 -> 130): a tuned value that does not move
    with every jitter of a measurement, and never below what the measurement asked for."""
    if x <= 0:
        return 0.0
    scale = 10.0 ** (math.floor(math.log10(x)) - 1)
    return float(f"{math.ceil(round(x / scale, 9)) * scale:.2g}")  # the format drops float noise (0.013000...01)


# ---- per client: the sync interval -------------------------------------------------------------------


@dataclass(frozen=True)
class LinkMeasurements:
    """What one client measured: upload/download rates (bytes/s), RTT (s) and one local step's time (s).

    None: not measured yet (no push timed, no model transfer long enough to time, no heartbeat, no round).
    """

    up_bytes_per_s: float | None
    down_bytes_per_s: float | None
    rtt_s: float | None
    step_s: float | None


@dataclass(frozen=True)
class Interval:
    """A sync interval: train `seconds` (T) or `steps` (H), whichever first; `reason` says why."""

    seconds: float
    steps: int
    reason: str


def interval_choice(m: LinkMeasurements, *, push_bytes: int, model_bytes: int, comm_fraction: float,
                    min_s: float, max_s: float, fallback: Interval) -> Interval:
    """The configured round, or a longer one when the link needs it to spend at most `comm_fraction` communicating.

    One round = training + C communicating, C = push_bytes / up + model_bytes / down + 2 RTT (the push RPC and
    the model-stream request). C <= f (T + C) gives T >= C (1 - f) / f. The configured round (`fallback`: T
    seconds or H steps, whichever comes first, so min(T, H x step time) of training) stands while it is that
    long already: the tuner lengthens the rounds a slow link needs and never stretches a fast client's, since
    fewer, longer rounds make each delta staler and larger (docs/design.md measures what that costs). Otherwise
    T is rounded up to two significant digits (`round_up_2`), clamped to [min_s, max_s], and H = ceil(T / step time), so
    both stop conditions agree. Until every rate and the step time are measured, the configured T and H stand;
    an unmeasured RTT counts as 0.
    """
    f = _positive("comm_fraction", comm_fraction)
    if f >= 1:
        raise TuningError(f"comm_fraction must be below 1, got {comm_fraction!r}")
    _range("sync interval", min_s, max_s)
    if push_bytes < 0 or model_bytes < 0:
        raise TuningError(f"byte counts must be >= 0, got push_bytes={push_bytes}, model_bytes={model_bytes}")
    missing = [name for name, v in (("upload rate", m.up_bytes_per_s), ("download rate", m.down_bytes_per_s),
                                    ("step time", m.step_s)) if v is None]
    if missing:
        return Interval(fallback.seconds, fallback.steps, f"{', '.join(missing)} not measured yet: the configured "
                        f"T={fallback.seconds:g} s, H={fallback.steps} until they are")
    up = _positive("upload rate", m.up_bytes_per_s)
    down = _positive("download rate", m.down_bytes_per_s)
    step = _positive("step time", m.step_s)
    rtt = 0.0 if m.rtt_s is None else _non_negative("RTT", m.rtt_s)
    comm = push_bytes / up + model_bytes / down + 2 * rtt
    want = comm * (1 - f) / f
    rtt_note = " (RTT not measured yet: 0)" if m.rtt_s is None else ""
    measured = (f"communication ~{comm:.3g} s a round ({push_bytes} B up at {up / 1e6:.3g} MB/s, {model_bytes} B "
                f"down at {down / 1e6:.3g} MB/s, 2 x RTT {rtt:.3g} s{rtt_note}); at most {f:g} of a round "
                f"communicating needs T >= {want:.3g} s")
    configured = min(fallback.seconds, fallback.steps * step)
    if want <= configured:
        return Interval(fallback.seconds, fallback.steps, (
            f"{measured}: the configured round (T={fallback.seconds:g} s, H={fallback.steps} steps of {step:.3g} s "
            f"= {configured:.3g} s of training) meets it and stands"))
    seconds = min(max(round_up_2(want), min_s), max_s)
    steps = max(1, math.ceil(seconds / step))
    clamp = "" if min_s < want < max_s else f", clamped to [{min_s:g}, {max_s:g}] s"
    return Interval(seconds, steps, f"{measured}{clamp}: T = {seconds:g} s, {steps} steps of {step:.3g} s")


# ---- per federation, at the PS: the straggler timeout ----------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile: the ceil(q n)-th smallest value (q=0.5 of [1, 2, 3, 4] is 2)."""
    if not values:
        raise TuningError("quantile of no values")
    if math.isnan(q) or not 0 < q <= 1:
        raise TuningError(f"quantile must be in (0, 1], got {q!r}")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def straggler_timeout_choice(round_s: Mapping[str, float], *, q: float, margin: float, min_s: float, max_s: float,
                             fallback_s: float) -> tuple[float, str]:
    """Seconds a sync round waits after its first delta: margin × the q-quantile client round time, less the
    fastest client's round time (the round's timer starts when the fastest delivers), up to two significant digits,
    clamped to [min_s, max_s].

    `round_s` is each client's recent round time as the PS measures it: from the later of the publication of
    the version it trained on and its previous push, to its push. No client measured: `fallback_s`.
    """
    _range("straggler timeout", min_s, max_s)
    m = _positive("margin", margin)
    if m < 1:
        raise TuningError(f"margin must be >= 1, got {margin!r}")
    if not round_s:
        return fallback_s, f"no client round timed yet: the configured {fallback_s:g} s"
    for client, seconds in round_s.items():
        _non_negative(f"round time of {client}", seconds)
    slow = quantile(list(round_s.values()), q)
    fast = min(round_s.values())
    want = m * slow - fast
    value = min(max(round_up_2(want), min_s), max_s)
    clamp = "" if min_s < want < max_s else f", clamped to [{min_s:g}, {max_s:g}] s"
    return value, (f"{q:g}-quantile of {len(round_s)} clients' round times {slow:.3g} s x margin {m:g} less the "
                   f"fastest's {fast:.3g} s = {want:.3g} s{clamp}: {value:g} s")


# ---- per federation, at the PS: sync or async ---------------------------------------------------------------

Mode = Literal["sync", "async"]


def mode_advice(round_s: Mapping[str, float], current: Mode, *, async_above: float,
                sync_below: float) -> tuple[Mode, str]:
    """Sync while clients are alike, async once the slowest/fastest round-time ratio passes `async_above`.

    Hysteresis: back to sync only below `sync_below` (< async_above), so a spread near one threshold does
    not flip the advice each round. Fewer than two clients timed: `current` stands.
    """
    hi, lo = _positive("async_above", async_above), _positive("sync_below", sync_below)
    if lo < 1 or lo >= hi:
        raise TuningError(f"need 1 <= sync_below < async_above, got {sync_below!r} and {async_above!r}")
    if current not in ("sync", "async"):
        raise TuningError(f"mode must be 'sync' or 'async', got {current!r}")
    if len(round_s) < 2:
        return current, f"{len(round_s)} client(s) timed, need 2 to measure a spread: {current} stands"
    for client, seconds in round_s.items():
        _positive(f"round time of {client}", seconds)
    slowest, fastest = max(round_s, key=round_s.get), min(round_s, key=round_s.get)
    ratio = round_s[slowest] / round_s[fastest]
    spread = f"slowest {slowest} {round_s[slowest]:.3g} s / fastest {fastest} {round_s[fastest]:.3g} s = {ratio:.3g}"
    if ratio > hi:
        return "async", f"{spread} > async_above {hi:g}: sync rounds would wait for the slowest"
    if ratio < lo:
        return "sync", f"{spread} < sync_below {lo:g}: clients alike, sync rounds waste little"
    return current, f"{spread} within [{lo:g}, {hi:g}] (hysteresis): {current} stands"


def initial_mode(configured: str) -> Mode:
    """The mode a federation runs before anything is measured: `auto` starts synchronous.

    With nothing timed there is no spread to act on, and clients of equal speed (the common start: one
    site's identical GPUs) are best served by sync FedAvg (every round holds every client's delta, no
    staleness); the advice moves an `auto` federation to async once the measured spread says so.
    """
    if configured == "auto":
        return "sync"
    if configured not in ("sync", "async"):
        raise TuningError(f"mode must be 'sync', 'async' or 'auto', got {configured!r}")
    return configured  # type: ignore[return-value]
