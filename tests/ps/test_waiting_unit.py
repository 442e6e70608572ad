"""Whom a sync round waits for (ps_server.waiting), rule by rule: times are seconds, the round published at
t = 100, heartbeats every 15 s (a silence bound of 45 s without a timed round), straggler margin 1.5, straggler
timeout 120 s (10 s where a case names it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from client_agent.connection.ps_client import PSClient
from ps_server.waiting import Activity, heartbeat_interval_s, not_waiting, silence_bound_s

ROUND_START = 100.0
HEARTBEAT_S = 15.0
MARGIN = 1.5


def activity(first_seen: float = 90.0, progress_at: float = 0.0, delta_at: float = 0.0,
             upload_at: float = 0.0) -> Activity:
    return Activity("c", first_seen, progress_at, delta_at, upload_at)


@pytest.mark.parametrize(
    ("name", "a", "now", "round_time_s", "expected"),
    [
        ("seen just now, never trained", activity(), 130.0, None, None),
        ("never trained, past three heartbeats", activity(), 136.0, None, "no_progress_since_join"),
        ("progress reported within the bound", activity(progress_at=120.0), 160.0, None, None),
        ("progress stopped three heartbeats ago", activity(progress_at=110.0), 156.0, None, "no_progress_in_round"),
        ("its delta is in this round", activity(delta_at=101.0), 1000.0, None, None),
        ("a push whose bytes keep arriving", activity(upload_at=990.0), 1000.0, None, None),
        ("a push whose bytes stopped arriving", activity(delta_at=50.0, upload_at=110.0), 1000.0, None,
         "no_progress_in_round"),
        ("trained last round: silence counts from this round's start", activity(delta_at=50.0), 140.0, None, None),
        ("trained last round, silent this one", activity(delta_at=50.0), 146.0, None, "no_progress_in_round"),
        ("a slow client's own round time sets its bound", activity(progress_at=110.0), 200.0, 80.0, None),
        ("and past it, it is not waited for", activity(progress_at=110.0), 231.0, 80.0, "no_progress_in_round"),
        ("never trained, past a straggler timeout shorter than the bound", activity(), 101.0, None,
         "no_progress_since_join"),
        ("trained before: the straggler timeout does not shorten its bound", activity(delta_at=50.0), 140.0, None,
         None),
    ],
)
def test_not_waiting(name, a, now, round_time_s, expected):
    timeout = 10.0 if "straggler timeout" in name else 120.0
    why = not_waiting(a, now=now, round_start=ROUND_START, round_time_s=round_time_s, heartbeat_s=HEARTBEAT_S,
                      margin=MARGIN, straggler_timeout_s=timeout)
    assert (why.reason if why else None) == expected, name


def test_the_bound_is_three_heartbeats_or_the_margin_times_the_clients_round_time_whichever_is_longer():
    assert silence_bound_s(None, HEARTBEAT_S, MARGIN) == 45.0
    assert silence_bound_s(10.0, HEARTBEAT_S, MARGIN) == 45.0
    assert silence_bound_s(80.0, HEARTBEAT_S, MARGIN) == 120.0


@pytest.mark.parametrize(("ttl", "interval"), [(300.0, 15.0), (12.0, 4.0), (1.5, 1.0)])
def test_the_heartbeat_interval_is_the_clients(ttl, interval):
    client = SimpleNamespace(session_ttl_s=ttl, _pending=None)  # a client with no delta waiting to be folded in
    assert heartbeat_interval_s(ttl) == PSClient._heartbeat_interval(client) == interval
