"""LinkProfile: fields, validation, and the 'LAT/JITTER/UP/DOWN,outage...' shorthand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from geofed_apps.wan.profile import LinkProfile, Outage, format_rate, parse_duration, parse_outage, parse_rate


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50ms", LinkProfile(latency_ms=50)),
        ("1.5s/20ms", LinkProfile(latency_ms=1500, jitter_ms=20)),
        (
            "50ms/10ms/20MBps",
            LinkProfile(latency_ms=50, jitter_ms=10, up_bytes_per_s=20e6, down_bytes_per_s=20e6),
        ),
        (
            "50ms/10ms/20MBps/40MBps",
            LinkProfile(latency_ms=50, jitter_ms=10, up_bytes_per_s=20e6, down_bytes_per_s=40e6),
        ),
        ("0ms/0ms/100Mbps/unlimited", LinkProfile(up_bytes_per_s=12_500_000)),
        (
            "2min/0ms/1MiB/s/0,reset@30s,blackhole@1min+10s",
            LinkProfile(
                latency_ms=120_000,
                up_bytes_per_s=1 << 20,
                outages=[Outage(kind="reset", at_s=30), Outage(kind="blackhole", at_s=60, duration_s=10)],
            ),
        ),
    ],
)
def test_parse_reads_the_shorthand(text: str, expected: LinkProfile) -> None:
    assert LinkProfile.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("50", "needs? a unit|must be a non-negative number with a unit"),
        ("50ms/10ms/20MBps/40MBps/1MBps", "must be 'LAT"),
        ("", "must be 'LAT"),
        ("-5ms", "non-negative number with a unit"),
        ("50ms/0ms/20MB", "must look like '20MBps'"),
        ("50ms,crash@3s", "outage 'crash@3s' must look like"),
        ("50ms,blackhole@3s", "blackhole outage needs duration_s > 0"),
    ],
)
def test_parse_rejects_bad_shorthand_with_a_specific_message(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LinkProfile.parse(text)


@pytest.mark.parametrize(
    ("text", "bytes_per_s"),
    [("8000Bps", 8000), ("20MBps", 20_000_000), ("20 MB/s", 20_000_000), ("512KiB/s", 524_288),
     ("100Mbps", 12_500_000), ("1Gbit/s", 125_000_000), ("1e6Bps", 1_000_000), ("unlimited", 0), ("0", 0)],
)  # fmt: skip
def test_parse_rate_units(text: str, bytes_per_s: int) -> None:
    assert parse_rate(text) == bytes_per_s


def test_parse_rate_rejects_rates_below_a_byte_per_second() -> None:
    with pytest.raises(ValueError, match="below 1 byte per second"):
        parse_rate("1bps")


def test_parse_duration_converts_units_and_keeps_same_unit_exact() -> None:
    assert parse_duration("250us", unit="ms") == pytest.approx(0.25)
    assert parse_duration("0.1ms", unit="ms") == 0.1
    assert parse_duration("2min", unit="s") == 120.0


def test_reset_outage_duration_is_optional_and_parsed() -> None:
    assert parse_outage("reset@30s") == Outage(kind="reset", at_s=30)
    assert parse_outage(" reset @ 30s + 5s ") == Outage(kind="reset", at_s=30, duration_s=5)


@pytest.mark.parametrize(
    "fields",
    [
        {"latency_ms": -1},
        {"jitter_ms": -1},
        {"up_bytes_per_s": -1},
        {"down_bytes_per_s": -5},
        {"latecny_ms": 5},
    ],
)
def test_invalid_fields_are_rejected(fields: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        LinkProfile(**fields)


def test_profile_is_immutable_so_the_proxy_thread_can_share_it() -> None:
    profile = LinkProfile(latency_ms=5)
    with pytest.raises(ValidationError):
        profile.latency_ms = 10  # type: ignore[misc]


def test_every_field_is_described() -> None:
    for model in (LinkProfile, Outage):
        assert all(field.description for field in model.model_fields.values()), model.__name__


def test_outages_after_skips_the_ones_already_started() -> None:
    profile = LinkProfile.parse("0ms,reset@1s,blackhole@5s+1s,reset@9s")
    assert [o.at_s for o in profile.outages_after(5.0)] == [5.0, 9.0]


durations = st.one_of(st.integers(0, 600_000).map(float), st.floats(0, 600_000, allow_nan=False))
rates = st.integers(0, 10**11)
outages = st.builds(
    Outage,
    kind=st.just("blackhole"),
    at_s=st.floats(0, 1e6, allow_nan=False),
    duration_s=st.floats(1e-3, 1e4, allow_nan=False),
) | st.builds(Outage, kind=st.just("reset"), at_s=st.floats(0, 1e6), duration_s=st.floats(0, 1e4))


@given(latency=durations, jitter=durations, up=rates, down=rates, outs=st.lists(outages, max_size=3))
def test_shorthand_round_trips(latency: float, jitter: float, up: int, down: int, outs: list[Outage]) -> None:
    """`parse(p.shorthand()) == p`: the shorthand printed in logs is a faithful description."""
    profile = LinkProfile(
        latency_ms=latency, jitter_ms=jitter, up_bytes_per_s=up, down_bytes_per_s=down, outages=outs
    )
    assert LinkProfile.parse(profile.shorthand()) == profile


@pytest.mark.parametrize(("value", "text"), [(0, "unlimited"), (20_000_000, "20MBps"), (1500, "1500Bps")])
def test_format_rate(value: int, text: str) -> None:
    assert format_rate(value) == text
