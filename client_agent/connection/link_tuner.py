"""The client's link: what it measures (upload and download rates, RTT, the bytes of the last push and model
transfer) and what it tunes from that (the round's codec and its sync interval T, H).

`LinkMeter` is fed by the PS client as pushes, heartbeats and model transfers complete; it reads no clock
(the caller passes the times). `LinkTuner` turns its measurements into the next round's codec and interval
with the pure policies of `geofed.codec.policy` and `geofed.tuning`, and logs each change of a choice with
its reason. A federation that tunes nothing gets the fixed policies, which return the configured values.
"""

from __future__ import annotations

import logging
from collections import deque

import numpy as np

from geofed.codec import Codec, make_codec
from geofed.codec.policy import BF16_BYTES_PER_PARAM, codec_choice, delta_range_to_rms
from geofed.codec.sparse import sparse_params
from geofed.config import FederationConfig
from geofed.tuning import Interval, LinkMeasurements, interval_choice

log = logging.getLogger("geofed.client")

RTT_WINDOW = 8  # heartbeat round trips the RTT is the least of
TIMED_MIN_BYTES = 256 << 10  # a transfer smaller than this says too little about the link to be timed


def blend(previous: float | None, sample: float) -> float:
    """A measured rate or time, smoothed: the mean of the previous estimate and the new sample."""
    return sample if previous is None else 0.5 * (previous + sample)


class LinkMeter:
    """What one client measured on its link to the PS; None until measured."""

    def __init__(self) -> None:
        self.up_bytes_per_s: float | None = None
        self.down_bytes_per_s: float | None = None
        self.rtt_s: float | None = None
        self.last_push_bytes: int | None = None
        self.last_model_bytes: int | None = None
        self._rtt_samples: deque[float] = deque(maxlen=RTT_WINDOW)
        self._first_chunk: tuple[int, float, int] | None = None  # (version, arrival, bytes) of a transfer's start
        # (time, whether the PS was known to hold a version newer than ours) when the model stream was opened:
        # a one-chunk transfer that needed no wait is timed from there.
        self._opened: tuple[float, bool] | None = None

    def pushed(self, size: int, seconds: float, *, duplicate: bool) -> None:
        """A push of `size` payload bytes was answered after `seconds`.

        A DUPLICATE is answered right after the header, before the payload crosses the link: its size over
        its time is no upload rate (it would inflate what the tuners plan with)."""
        self.last_push_bytes = size
        if not duplicate and size > TIMED_MIN_BYTES and seconds > 0:
            self.up_bytes_per_s = blend(self.up_bytes_per_s, size / seconds)

    def round_trip(self, seconds: float) -> None:
        """One heartbeat's round trip. The RTT is the least of the last RTT_WINDOW of them (a windowed
        minimum, as TCP and BBR keep theirs): a heartbeat caught in a link stall or black hole is no round
        trip, and one such sample in a mean lengthens a tuned interval many times over."""
        self._rtt_samples.append(seconds)
        self.rtt_s = min(self._rtt_samples)

    def stream_opened(self, now: float, newer_known: bool) -> None:
        """The model stream was (re)opened at `now`; `newer_known`: the PS was known to hold a newer version."""
        self._opened = (now, newer_known)

    def first_chunk(self, version: int, now: float, nbytes: int) -> None:
        """The first chunk of a transfer of `version` arrived at `now`, `nbytes` long."""
        self._first_chunk = (version, now, nbytes)

    def downloaded(self, version: int, nbytes: int, now: float) -> None:
        """A transfer of `version` finished at `now`: the download rate from the bytes after its first chunk
        over the time since that chunk arrived.

        The first chunk's own time is unknown (it includes the PS's wait for the version and its encoding), so
        it is left out; a small transfer says too little about the link and is not counted.

        A one-chunk transfer is timed from the stream's opening instead, less one RTT (request and first
        byte), when the PS was known then to hold a version newer than the client's (a push response or the
        Join named it), so the PS sent at once and no round wait is in it; the PS's encoding time still
        counts, so the rate errs low. Only the stream's first transfer qualifies.
        """
        self.last_model_bytes = nbytes
        first, opened = self._first_chunk, self._opened
        self._first_chunk = self._opened = None
        if first is None or first[0] != version:
            return
        rest, elapsed = nbytes - first[2], now - first[1]
        if rest > TIMED_MIN_BYTES and elapsed > 0:
            self.down_bytes_per_s = blend(self.down_bytes_per_s, rest / elapsed)
        elif rest == 0 and opened is not None and opened[1] and self.rtt_s is not None and nbytes > TIMED_MIN_BYTES:
            transfer = now - opened[0] - self.rtt_s
            if transfer > 0:
                self.down_bytes_per_s = blend(self.down_bytes_per_s, nbytes / transfer)

    def measurements(self, step_s: float | None) -> LinkMeasurements:
        return LinkMeasurements(self.up_bytes_per_s, self.down_bytes_per_s, self.rtt_s, step_s)


class FixedCodec:
    """The federation's codec, every round."""

    tuned = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.candidates: tuple[str, ...] = (name,)  # what a round's choice can be

    def choose(self, meter: LinkMeter, numel: int, budget_s: float, values: np.ndarray | None) -> tuple[str, str]:
        return self.name, "configured"


class LinkRateCodec(FixedCodec):
    """int16 when the measured link carries it within the per-sync budget, else int8 (§III-B3); bf16 when 2
    bytes per parameter fit and `values` (the delta, when given) has outliers enough for bf16 to err less."""

    tuned = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.candidates = ("int8", "int16")  # without the delta's values, as the slice-wise path asks

    def choose(self, meter: LinkMeter, numel: int, budget_s: float, values: np.ndarray | None) -> tuple[str, str]:
        spread = None
        rate = meter.up_bytes_per_s
        if values is not None and rate is not None and numel * BF16_BYTES_PER_PARAM / rate <= budget_s:
            spread = delta_range_to_rms(values)  # one pass over the delta, only when bf16 would fit the link
        return codec_choice(rate, numel, budget_s, spread)


# The codec names that pick a codec per round; every other name is a codec of its own.
CODEC_POLICIES: dict[str, type[FixedCodec]] = {"auto": LinkRateCodec}


def codec_policy(name: str) -> FixedCodec:
    """How a federation whose `codec.name` is `name` picks each round's codec."""
    return CODEC_POLICIES.get(name, FixedCodec)(name)


class FixedInterval:
    """The configured T and H, every round."""

    tuned = False

    def choose(self, fed: FederationConfig, meter: LinkMeter, numel: int, step_s: float | None) -> Interval:
        return Interval(fed.training.sync_interval_s, fed.training.local_steps, "configured")


class LinkInterval(FixedInterval):
    """T and H from the measured rates, RTT and step time (`geofed.tuning.interval_choice`)."""

    tuned = True

    def choose(self, fed: FederationConfig, meter: LinkMeter, numel: int, step_s: float | None) -> Interval:
        t, a = fed.training, fed.autotune
        return interval_choice(
            meter.measurements(step_s),
            push_bytes=meter.last_push_bytes or 0,
            model_bytes=meter.last_model_bytes or 4 * numel,
            comm_fraction=a.comm_fraction,
            min_s=a.interval_min_s,
            max_s=a.interval_max_s,
            fallback=Interval(t.sync_interval_s, t.local_steps, ""),
        )


class LinkTuner:
    """The round's codec and interval for one client, from its `LinkMeter`; each change is logged once."""

    def __init__(self, fed: FederationConfig, meter: LinkMeter, numel: int, client_id: str) -> None:
        self.fed, self.meter, self.numel, self.client_id = fed, meter, numel, client_id
        self.codec_policy = codec_policy(fed.codec.name)
        self.interval_policy = LinkInterval() if fed.autotune.interval else FixedInterval()
        self.step_s: float | None = None  # seconds per local step in the last round (the interval's input)
        self._codec: str | None = None
        self._interval: tuple[float, int] | None = None

    def codec_name(self, values: np.ndarray | None = None) -> str:
        """The codec of the next push; `values`, the delta, lets a tuned choice weigh its outliers."""
        name, reason = self.codec_policy.choose(self.meter, self.numel, self.fed.codec.sync_time_budget_s, values)
        if self.codec_policy.tuned and name != self._codec:
            log.info("event=autotune client=%s knob=codec value=%s reason=%r", self.client_id, name, reason)
        self._codec = name
        return name

    def codec(self, name: str) -> Codec:
        """Codec `name` with the federation's entropy coding, block scales and sparse settings."""
        c = self.fed.codec
        return make_codec(name, c.entropy, c.block_scales, sparse=sparse_params(c))

    def block(self) -> int:
        """The block-scale length every codec this tuner can choose shares (0: none); slices start on it."""
        return getattr(self.codec(self.codec_policy.candidates[0]), "block", 0)

    def interval(self) -> tuple[float, int]:
        """T and H of the next round."""
        choice = self.interval_policy.choose(self.fed, self.meter, self.numel, self.step_s)
        if self.interval_policy.tuned and (choice.seconds, choice.steps) != self._interval:
            log.info(
                "event=autotune client=%s knob=sync_interval value=%g steps=%d reason=%r",
                self.client_id,
                choice.seconds,
                choice.steps,
                choice.reason,
            )
        self._interval = (choice.seconds, choice.steps)
        return float(choice.seconds), int(choice.steps)
