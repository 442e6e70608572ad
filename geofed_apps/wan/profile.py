"""What one emulated WAN link looks like: delay, jitter, asymmetric rate caps and scripted outages.

Paper §I and §III-C2: edge links run at tens of MB/s with RTTs from tens of ms to minutes, are
asymmetric, and break mid-transfer; `LinkProfile` describes one such client↔PS link for `WanProxy`.
A compact shorthand ("50ms/10ms/20MBps/40MBps,blackhole@60s+10s") keeps test and CLI setups short.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_NUMBER = r"((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_DURATION = re.compile(rf"^\s*{_NUMBER}\s*(us|ms|s|min)\s*$")
_SECONDS_PER_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}
_RATE = re.compile(rf"^\s*{_NUMBER}\s*([kKMGT]i?)?(B|b|bit)(?:ps|/s)\s*$")
_PREFIX = {
    None: 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "ki": 1 << 10, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}  # fmt: skip
_UNLIMITED = {"0", "inf", "unlimited", "none"}
_OUTAGE = re.compile(r"^\s*(reset|blackhole)\s*@\s*(.+?(?:us|ms|s|min))\s*(?:\+\s*(.+?))?\s*$")


class _Frozen(BaseModel):
    """Profiles are values: immutable (safe to hand to the proxy thread) and strict about unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Outage(_Frozen):
    """One scripted failure of the link, timed from `WanProxy.start()` (paper §III-B4: preemptions, cuts)."""

    at_s: float = Field(ge=0, description="Seconds after the proxy started when the outage begins.")
    duration_s: float = Field(
        0.0,
        ge=0,
        description=(
            "blackhole: seconds nothing is delivered and new connections hang; "
            "reset: seconds during which new connections are also reset (0 = only live ones)."
        ),
    )
    kind: Literal["reset", "blackhole"] = Field(
        description="reset: every live connection is torn down with a TCP RST; "
        "blackhole: bytes are held (not lost) until the outage ends, as on a link that silently drops."
    )

    @model_validator(mode="after")
    def _blackhole_needs_duration(self) -> Outage:
        if self.kind == "blackhole" and self.duration_s <= 0:
            raise ValueError(f"a blackhole outage needs duration_s > 0 (at_s={self.at_s})")
        return self

    def shorthand(self) -> str:
        """The `kind@at+duration` form that `parse_outage` reads back."""
        tail = f"+{_format_number(self.duration_s, 's')}" if self.duration_s > 0 else ""
        return f"{self.kind}@{_format_number(self.at_s, 's')}{tail}"


class LinkProfile(_Frozen):
    """Conditions of one client↔PS link; `up` is client→PS, `down` is PS→client, 0 means no cap."""

    latency_ms: float = Field(
        0.0, ge=0, le=600_000, description="One-way propagation delay in milliseconds (RTT is twice this)."
    )
    jitter_ms: float = Field(
        0.0,
        ge=0,
        le=600_000,
        description="Each chunk's delay varies uniformly by ±jitter_ms; order is always preserved.",
    )
    up_bytes_per_s: int = Field(
        0, ge=0, description="Bandwidth cap client→PS in bytes per second (0 = unlimited)."
    )
    down_bytes_per_s: int = Field(
        0, ge=0, description="Bandwidth cap PS→client in bytes per second (0 = unlimited)."
    )
    outages: tuple[Outage, ...] = Field(
        (), description="Scripted resets and blackholes, timed from proxy start."
    )
    seed: int | None = Field(
        None, description="Seed of the jitter random stream, for reproducible runs (None = fresh entropy)."
    )

    @classmethod
    def parse(cls, text: str) -> LinkProfile:
        """Read 'LAT[/JITTER[/RATE | /UP/DOWN]][,kind@at[+dur]...]', e.g. '50ms/10ms/20MBps/40MBps,reset@30s'.

        Three fields mean a symmetric rate; rates take B (bytes) or b/bit (bits) with SI or IEC prefixes.
        """
        head, *outage_texts = [part.strip() for part in text.split(",")]
        fields = [f.strip() for f in re.split(r"/(?!s)", head)]  # '1MiB/s' is one field
        if not head or len(fields) > 4:
            raise ValueError(
                f"link shorthand {text!r} must be 'LAT[/JITTER[/RATE | /UP/DOWN]]', "
                "e.g. '50ms/10ms/20MBps/40MBps'"
            )
        latency_ms = parse_duration(fields[0], unit="ms", what="latency")
        jitter_ms = parse_duration(fields[1], unit="ms", what="jitter") if len(fields) > 1 else 0.0
        rates = [parse_rate(f) for f in fields[2:]]
        up, down = (rates * 2)[:2] if rates else (0, 0)
        outages = tuple(parse_outage(o) for o in outage_texts)
        return cls(
            latency_ms=latency_ms,
            jitter_ms=jitter_ms,
            up_bytes_per_s=up,
            down_bytes_per_s=down,
            outages=outages,
        )

    def shorthand(self) -> str:
        """The compact form `parse` reads back (the seed is not part of it)."""
        head = "/".join(
            [
                _format_number(self.latency_ms, "ms"),
                _format_number(self.jitter_ms, "ms"),
                format_rate(self.up_bytes_per_s),
                format_rate(self.down_bytes_per_s),
            ]
        )
        return ",".join([head, *(o.shorthand() for o in self.outages)])

    def outages_after(self, elapsed_s: float) -> tuple[Outage, ...]:
        """Outages that have not started yet `elapsed_s` seconds after start (what is left to schedule)."""
        return tuple(o for o in self.outages if o.at_s >= elapsed_s)


def parse_duration(text: str, *, unit: Literal["ms", "s"], what: str = "duration") -> float:
    """`text` ('250us', '50ms', '1.5s', '2min') in `unit`; a unit is required so '50' is never misread."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"{what} {text!r} must be a non-negative number with a unit: us, ms, s or min (e.g. '50ms')"
        )
    number, given = float(match.group(1)), match.group(2)
    if given == unit:
        return number  # exact: no float round trip through another unit
    return number * _SECONDS_PER_UNIT[given] / _SECONDS_PER_UNIT[unit]


def parse_rate(text: str) -> int:
    """Bytes per second from '20MBps', '512KiB/s', '100Mbps', '8000Bps' or '0'/'unlimited' (no cap)."""
    if text.strip().lower() in _UNLIMITED:
        return 0
    match = _RATE.match(text)
    if match is None:
        raise ValueError(
            f"rate {text!r} must look like '20MBps', '512KiB/s' or '100Mbps' (B = bytes, b = bits) "
            "or be 'unlimited'"
        )
    number, prefix, unit = match.groups()
    value = float(number) * _PREFIX[prefix] / (1 if unit == "B" else 8)
    if value > 0 and round(value) == 0:
        raise ValueError(f"rate {text!r} is below 1 byte per second")
    return round(value)


def parse_outage(text: str) -> Outage:
    """An `Outage` from 'reset@30s', 'reset@30s+5s' (refuse new connections 5 s) or 'blackhole@60s+10s'."""
    match = _OUTAGE.match(text)
    if match is None:
        raise ValueError(f"outage {text!r} must look like 'reset@30s', 'reset@30s+5s' or 'blackhole@60s+10s'")
    kind, at, duration = match.groups()
    at_s = parse_duration(at, unit="s", what="outage start")
    duration_s = parse_duration(duration, unit="s", what="outage duration") if duration else 0.0
    return Outage(kind=kind, at_s=at_s, duration_s=duration_s)


def format_rate(bytes_per_s: int) -> str:
    """'20MBps' for 20_000_000; the largest SI prefix that divides exactly, so parsing gives it back."""
    if bytes_per_s == 0:
        return "unlimited"
    for prefix, scale in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if bytes_per_s % scale == 0:
            return f"{bytes_per_s // scale}{prefix}Bps"
    return f"{bytes_per_s}Bps"


def _format_number(value: float, unit: str) -> str:
    """'50ms' or '0.1ms': short when that is exact, otherwise every digit, so parsing gives it back."""
    short = f"{value:g}"
    return f"{short if float(short) == value else repr(value)}{unit}"
