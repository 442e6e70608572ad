"""`status.sites` of a Federation (issue 15): the PS's per-client accounting summed per site (pure)."""

from __future__ import annotations

import datetime as dt

from geofed_operator.federation_status import federation_status_from_ps

T0 = dt.datetime(2025, 1, 1, 12, 0, tzinfo=dt.UTC)
PS = {"version": 12, "connected_clients": 3, "known_clients": 3, "mode": "async", "has_model": True}
CLIENTS = [  # AdminClient.list_clients() entries (ClientInfo)
    {
        "client_id": "uni.a",
        "site": "uni",
        "tokens_trained": 1000,
        "update_mass": 2.0,
        "share_window": 0.5,
        "share_run": 0.25,
        "compute_s": 10.0,
    },
    {
        "client_id": "lab.a",
        "site": "lab",
        "tokens_trained": 3000,
        "update_mass": 5.0,
        "share_window": 0.2,
        "share_run": 0.625,
        "compute_s": 40.0,
    },
    {
        "client_id": "uni.b",
        "site": "uni",
        "tokens_trained": 500,
        "update_mass": 1.0,
        "share_window": 0.3,
        "share_run": 0.125,
        "compute_s": 5.5,
    },
]


def test_sites_sum_their_clients_in_camel_case() -> None:
    st = federation_status_from_ps(PS, clients=CLIENTS, now=T0, generation=1, conditions=None)

    assert st["sites"] == [
        {
            "site": "lab",
            "clients": 1,
            "tokensTrained": 3000,
            "updateMass": 5.0,
            "shareWindow": 0.2,
            "shareRun": 0.625,
            "computeSeconds": 40.0,
        },
        {
            "site": "uni",
            "clients": 2,
            "tokensTrained": 1500,
            "updateMass": 3.0,
            "shareWindow": 0.8,
            "shareRun": 0.375,
            "computeSeconds": 15.5,
        },
    ]


def test_without_a_client_list_the_sites_are_left_alone() -> None:
    st = federation_status_from_ps(PS, now=T0, generation=1, conditions=None)

    assert "sites" not in st
