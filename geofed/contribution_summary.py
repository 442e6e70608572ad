"""Per-site contribution summary, shared by the status page, `geofed status` and the operator.

Input rows are per-client dicts with `site`, `tokens`, `mass`, `share_window`, `share_run` and `compute_s`
(the PS's contribution accounting, `ps_server/aggregation/contributions.py`); a site's figures are the
sums of its clients' (shares are fractions of one federation-wide total, so they add up).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SUMMED = ("tokens", "mass", "share_window", "share_run", "compute_s")


def from_client_list(clients: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`AdminClient.list_clients()` entries (wire names, `ClientInfo` in geofed.proto) as `site_summary` input."""
    return [{"site": c.get("site", ""), "tokens": c.get("tokens_trained", 0), "mass": c.get("update_mass", 0.0),
             "share_window": c.get("share_window", 0.0), "share_run": c.get("share_run", 0.0),
             "compute_s": c.get("compute_s", 0.0)} for c in clients]


def site_summary(clients: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """[{site, clients, tokens, mass, share_window, share_run, compute_s}], sorted by site."""
    sites: dict[str, dict[str, Any]] = {}
    for c in clients:
        row = sites.setdefault(c.get("site") or "", {"site": c.get("site") or "", "clients": 0,
                                                     **dict.fromkeys(SUMMED, 0)})
        row["clients"] += 1
        for key in SUMMED:
            row[key] += c.get(key) or 0
    return [sites[s] for s in sorted(sites)]
