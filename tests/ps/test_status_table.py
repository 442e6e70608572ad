"""`geofed status`'s table and the per-site summary, from hand-written ListClients entries."""

from __future__ import annotations

from geofed.contribution_summary import from_client_list, site_summary
from ps_server.status_table import format_status

STATUS = {"federation": "demo", "version": 42, "mode": "async", "connected_clients": 1, "active_clients": 2,
          "known_clients": 3,
          "buffered_deltas": 1, "last_train_loss": 2.5, "last_eval_loss": 2.75, "has_model": True}
CLIENTS = [
    {"client_id": "west.b", "site": "west", "state": "gone", "pushes": 1, "bytes_in": 2_000, "bytes_out": 0,
     "tokens_trained": 100, "update_mass": 1.0, "share_window": 0.0, "share_run": 0.1, "compute_s": 30.0,
     "rejoins": 2, "report": {}},
    {"client_id": "east.a", "site": "east", "state": "training", "pushes": 9, "bytes_in": 3_500_000,
     "bytes_out": 12_000_000, "tokens_trained": 81_920, "update_mass": 6.0, "share_window": 0.75, "share_run": 0.6,
     "compute_s": 600.0, "rejoins": 0, "report": {"train_loss": 2.4, "eval_loss": 2.6}},
    {"client_id": "west.a", "site": "west", "state": "waiting", "pushes": 4, "bytes_in": 1_000_000, "bytes_out": 0,
     "tokens_trained": 900, "update_mass": 3.0, "share_window": 0.25, "share_run": 0.3, "compute_s": 90.0,
     "rejoins": 1, "report": {}},
]


def test_sites_sum_their_clients():
    sites = site_summary(from_client_list(CLIENTS))

    assert [s["site"] for s in sites] == ["east", "west"]
    west = sites[1]
    assert west["clients"] == 2 and west["tokens"] == 1000 and west["compute_s"] == 120.0
    assert abs(west["share_run"] - 0.4) < 1e-12 and abs(west["share_window"] - 0.25) < 1e-12


def test_the_table_has_a_row_per_client_sorted_and_a_row_per_site():
    text = format_status(STATUS, CLIENTS)
    lines = text.splitlines()

    assert lines[0].startswith("federation demo  version 42  mode async  clients 2 active / 1 streaming / 3 known")
    assert lines[2].split()[:3] == ["CLIENT", "SITE", "STATE"]
    assert [line.split()[0] for line in lines[3:6]] == ["east.a", "west.a", "west.b"]
    east = lines[3].split()
    assert east[2] == "training" and "81,920" in east and "75.0%" in east and "60.0%" in east and "10.0" in east
    assert lines[6] == "" and lines[7].split() == ["SITE", "CLIENTS", "TOKENS", "MASS", "SHARE(WINDOW)",
                                                   "SHARE(RUN)", "COMPUTE"]
    assert lines[8].split() == ["east", "1", "81,920", "6", "75.0%", "60.0%", "10.0", "min"]
    assert lines[9].split() == ["west", "2", "1,000", "4", "25.0%", "40.0%", "2.0", "min"]


def test_an_empty_federation_says_so():
    text = format_status({**STATUS, "has_model": False}, [])

    assert "waiting for the master client's initial model" in text and "(no clients yet)" in text
